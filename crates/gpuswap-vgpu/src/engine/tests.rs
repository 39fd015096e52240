use gpuswap_core::MIB;
use gpuswap_core::placement::find_placement;

use super::*;
use crate::preset::{self, VgpuPreset};
use crate::workload::{self, Kind, Workload};

const S: u64 = 1_000_000_000;

fn vm(name: &str, workload: &str, mib: u64, start_s: u64, duration_s: u64) -> VmSpec {
    VmSpec {
        name: name.into(),
        workload: workload::find(workload).unwrap(),
        high_memory_bytes: mib * MIB,
        start_ns: start_s * S,
        duration_ns: Some(duration_s * S),
    }
}

fn run(placement: &str, vms: Vec<VmSpec>) -> VgpuOutcome {
    simulate(VgpuConfig {
        preset: preset::find("hd530").unwrap(),
        placement: find_placement(placement).unwrap(),
        vms,
        max_sim_ns: 10_000 * S,
        max_events: u64::MAX,
    })
    .unwrap()
}

#[test]
fn a_vm_alone_switches_in_once_and_renders_at_its_own_pace() {
    let out = run("gscale", vec![vm("a", "firefox-asteroids", 384, 0, 10)]);
    assert_eq!(out.switches, 1);
    assert_eq!(out.slot_copies, 6);
    // 6 ms of GPU and 8 ms of CPU per frame: about 71 frames per second.
    let fps = out.vms[0].fps();
    assert!((fps - 1000.0 / 14.0).abs() < 1.0, "{fps}");
}

#[test]
fn while_every_vgpu_fits_alone_all_placements_copy_the_same() {
    // Nine VMs of 384 MiB fill the 54 slots without sharing.
    let vms: Vec<VmSpec> = (0..9)
        .map(|i| vm(&format!("v{i}"), "openarena", 384, 0, 5))
        .collect();
    let copies: Vec<u64> = ["gscale", "dymgpu-size", "dymgpu-util"]
        .iter()
        .map(|p| run(p, vms.clone()).slot_copies)
        .collect();
    // Each vGPU's 6 slots are copied once, at its first switch-in.
    assert_eq!(copies, [54, 54, 54]);
}

#[test]
fn gvirt_holds_at_most_three_vgpus() {
    let vms: Vec<VmSpec> = (0..4)
        .map(|i| vm(&format!("v{i}"), "lightsmark", 384, 0, 5))
        .collect();
    let out = run("gvirt", vms);
    assert!(out.vms[..3].iter().all(|v| v.error.is_none()));
    let refused = out.vms[3].error.as_deref().unwrap();
    assert!(refused.contains("partitioned"), "{refused}");
    assert_eq!(out.vms[3].frames, 0);
}

#[test]
fn sharing_slots_costs_copies_at_every_switch() {
    // Eleven VMs of 384 MiB: two more than fit, so some slots are shared.
    let vms: Vec<VmSpec> = (0..11)
        .map(|i| vm(&format!("v{i}"), "urbanterror", 384, 0, 10))
        .collect();
    let shared = run("gscale", vms.clone());
    let fits: Vec<VmSpec> = vms[..9].to_vec();
    let alone = run("gscale", fits);
    assert!(
        shared.slot_copies > 10 * alone.slot_copies,
        "{} vs {}",
        shared.slot_copies,
        alone.slot_copies
    );
    assert!(shared.cycles_per_switch() > alone.cycles_per_switch());
}

#[test]
fn equal_vms_get_equal_gpu_time_and_runs_repeat_exactly() {
    let vms = vec![vm("a", "nexuiz", 384, 0, 10), vm("b", "nexuiz", 384, 0, 10)];
    let out = run("dymgpu-size", vms.clone());
    let (a, b) = (out.vms[0].gpu_ns as f64, out.vms[1].gpu_ns as f64);
    assert!((a - b).abs() / a < 0.01, "{a} vs {b}");
    assert_eq!(out, run("dymgpu-size", vms));
}

#[test]
fn a_job_ends_when_its_work_is_done() {
    let job = VmSpec {
        duration_ns: None,
        ..vm("nw", "nw", 384, 1, 0)
    };
    let out = run("gscale", vec![job]);
    let v = &out.vms[0];
    assert_eq!(v.gpu_ns, 2 * S);
    // Its 125 slices run back to back after one switch.
    assert!(v.end_ns - v.start_ns >= 2 * S && v.end_ns - v.start_ns < 2 * S + S / 100);
}

/// A long life at a high frame rate stops at the limit of events, not only at the
/// limit of time (a VM of 146 years once ran without end under the time limit alone).
#[test]
fn the_event_limit_stops_a_long_run() {
    let err = simulate(VgpuConfig {
        preset: preset::find("hd530").unwrap(),
        placement: find_placement("gscale").unwrap(),
        vms: vec![vm("a", "firefox-asteroids", 384, 0, 1_000_000_000)],
        max_sim_ns: u64::MAX,
        max_events: 1000,
    })
    .unwrap_err();
    assert!(
        matches!(err, VgpuError::EventLimit { limit: 1000, now_ns } if now_ns > 0),
        "{err}"
    );
    assert!(err.to_string().contains("--max-events"), "{err}");
}

#[test]
fn a_frame_workload_without_a_duration_is_refused() {
    let mut v = vm("a", "openarena", 384, 0, 1);
    v.duration_ns = None;
    let err = simulate(VgpuConfig {
        preset: preset::find("hd530").unwrap(),
        placement: find_placement("gscale").unwrap(),
        vms: vec![v],
        max_sim_ns: S,
        max_events: u64::MAX,
    })
    .unwrap_err();
    assert!(err.to_string().contains("needs a duration"), "{err}");
}

#[test]
fn utilization_based_placement_moves_vgpus_every_twenty_seconds() {
    // Eleven VMs: the busy ones should end up with slots of their own.
    let mut vms: Vec<VmSpec> = (0..6)
        .map(|i| vm(&format!("low{i}"), "lightsmark", 384, 0, 60))
        .collect();
    vms.extend((0..5).map(|i| vm(&format!("high{i}"), "urbanterror", 384, 0, 60)));
    let util = run("dymgpu-util", vms.clone());
    assert!(util.reallocations >= 1);
    let gscale = run("gscale", vms);
    assert_eq!(gscale.reallocations, 0);
}

/// A workload that renders a frame, then thinks for 30 s: idle by DymGPU's 20 s rule.
static SLEEPY: Workload = Workload {
    name: "sleepy",
    description: "a frame every 30 s",
    kind: Kind::Frames {
        gpu_ns: 1_000_000,
        cpu_ns: 30 * S,
    },
};

#[test]
fn an_idle_vgpu_holding_slots_alone_leaves_the_placement_until_it_has_work() {
    let sleepy = VmSpec {
        workload: &SLEEPY,
        ..vm("sleepy", "lightsmark", 40 * 64, 0, 70)
    };
    // 40 + 30 slots of 54: they share 16, and the sleepy one holds 24 alone.
    let busy = vm("busy", "urbanterror", 30 * 64, 0, 70);
    let out = run("dymgpu-size", vec![sleepy.clone(), busy.clone()]);
    // Idle after 20 s without work (its frames come every 30 s): released, twice.
    assert_eq!(out.idle_releases, 2);
    // It came back for its later frames.
    assert_eq!(out.vms[0].frames, 3, "{:?}", out.vms[0]);
    assert_eq!(out.vms[0].error, None);
    // gScale has no monitor.
    assert_eq!(run("gscale", vec![sleepy, busy]).idle_releases, 0);
}

#[test]
fn a_vgpu_moved_while_loaded_copies_its_slots_at_its_next_slice() {
    // A light VM at 0..30 and a long job: no free run for the job's 30 slots, so it is
    // right-aligned at 24..54 (6 shared). After 20 s, utilization-based placement moves
    // the busy job to the left: its next slice must copy its new slots, although its
    // context is the one loaded.
    let light = VmSpec {
        workload: &SLEEPY,
        ..vm("light", "lightsmark", 30 * 64, 0, 60)
    };
    let job = VmSpec {
        duration_ns: None,
        ..vm("job", "kmeans", 30 * 64, 0, 0)
    };
    let job = VmSpec {
        workload: &LONG_JOB,
        ..job
    };
    let out = run("dymgpu-util", vec![light, job]);
    assert_eq!(out.vms[1].moves, 1, "{:?}", out.vms[1]);
    // 30 + 30 at the start; the job's 30 again after its move at 20 s; the light one's
    // 30 when it comes back at 30 s (the job has just ended).
    assert_eq!(out.slot_copies, 30 + 30 + 30 + 30);
}

/// A job long enough to outlive a re-placement.
static LONG_JOB: Workload = Workload {
    name: "long-job",
    description: "30 s of GPU work",
    kind: Kind::Job { gpu_ns: 30 * S },
};

/// Mean frames per second of `n` CPU-bound desktop VMs (1 ms of GPU, 30 ms of CPU per
/// frame) of one slot each, on a host with `threads` hardware threads.
fn cpu_bound_fps(n: usize, threads: u32) -> f64 {
    let vms: Vec<VmSpec> = (0..n)
        .map(|i| vm(&format!("v{i}"), "gnome-system-monitor", 64, 0, 20))
        .collect();
    let out = simulate(VgpuConfig {
        preset: VgpuPreset {
            host_threads: threads,
            ..preset::find("hd530").unwrap()
        },
        placement: find_placement("gscale").unwrap(),
        vms,
        max_sim_ns: 10_000 * S,
        max_events: u64::MAX,
    })
    .unwrap();
    out.vms.iter().map(|v| v.fps()).sum::<f64>() / n as f64
}

#[test]
fn vms_computing_beyond_the_host_threads_share_them() {
    // Eight VMs on eight threads compute at full speed: as with a thread each.
    let eight = cpu_bound_fps(8, 8);
    assert!((eight - cpu_bound_fps(8, 64)).abs() < 1e-9, "{eight}");
    // Sixteen CPU-bound VMs on eight threads: the GPU round (16 x 1.5 ms with switches)
    // is shorter than a frame's CPU work, so the CPU is the bottleneck and each VM's
    // 30 ms take about 60.
    let shared = cpu_bound_fps(16, 8);
    let unshared = cpu_bound_fps(16, 64);
    let ratio = shared / unshared;
    assert!(
        (0.45..0.65).contains(&ratio),
        "{shared} / {unshared} = {ratio}"
    );
}

/// A job that always has queued work: busier than any frame workload.
static BUSY_JOB: Workload = Workload {
    name: "busy-job",
    description: "60 s of GPU work",
    kind: Kind::Job { gpu_ns: 60 * S },
};

#[test]
fn a_vgpu_whose_cpu_work_outlasts_the_round_is_switched_in_less_often() {
    // Two jobs with queued work at every turn (16 ms slices) and a desktop program with
    // rare frames (1 ms of GPU, then 50 ms of CPU), each with slots of its own. The
    // jobs' turns take about 33 ms, so the desktop's next frame is not queued at every
    // other turn of its: it is passed over, and switched in once per frame, about half
    // as often as the jobs.
    static RARE: Workload = Workload {
        name: "rare",
        description: "1 ms of GPU, 50 ms of CPU per frame",
        kind: Kind::Frames {
            gpu_ns: 1_000_000,
            cpu_ns: 50_000_000,
        },
    };
    let job = |name: &str| VmSpec {
        workload: &BUSY_JOB,
        duration_ns: Some(10 * S),
        ..vm(name, "lightsmark", 384, 0, 10)
    };
    let desktop = VmSpec {
        workload: &RARE,
        ..vm("desktop", "lightsmark", 384, 0, 10)
    };
    let out = run("gscale", vec![job("a"), job("b"), desktop]);
    let [a, b, low] = [0, 1, 2].map(|i| out.vms[i].switch_ins);
    assert!(a.abs_diff(b) <= 1, "{a} {b}");
    assert!(low.abs_diff(out.vms[2].frames) <= 1, "{:?}", out.vms[2]);
    assert!((low as f64) < 0.6 * a as f64, "desktop {low} vs job {a}");
    assert_eq!(out.switches, a + b + low);
}

#[test]
fn an_idle_ring_is_never_switched_in() {
    // The sleepy VM's ring holds work only for its frame at arrival (its next is 30 s
    // later, after it left): one switch-in, whatever the busy job beside it does.
    let sleepy = VmSpec {
        workload: &SLEEPY,
        ..vm("sleepy", "lightsmark", 384, 0, 10)
    };
    let job = VmSpec {
        workload: &BUSY_JOB,
        duration_ns: Some(10 * S),
        ..vm("job", "lightsmark", 384, 0, 10)
    };
    let out = run("gscale", vec![sleepy, job]);
    assert_eq!(out.vms[0].switch_ins, 1, "{:?}", out.vms[0]);
    assert_eq!(out.vms[1].switch_ins, 1, "{:?}", out.vms[1]);
}
