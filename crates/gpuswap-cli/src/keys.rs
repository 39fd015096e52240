//! Every key a scenario file takes, with its type, default and meaning: the one list
//! behind `gpuswap keys`, `gpuswap init` and the sweep's key checks. The mode parameters
//! come from the core's registry, so a new policy parameter appears here by itself.

use gpuswap_core::registry::{POLICIES, ParamDefault, ParamKind};

/// One scenario key.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KeySpec {
    /// Its path: `seed`, `device.preset`, `tenant.app`, `sweep.runs`.
    pub path: String,
    /// What it takes (with the unit).
    pub value: String,
    /// Its value when left out.
    pub default: String,
    /// What it sets.
    pub help: String,
}

/// Keys that do not depend on the mode: (path, value, default, help).
const FIXED: &[(&str, &str, &str, &str)] = &[
    (
        "seed",
        "whole number",
        "0",
        "seed of every random choice of the run (gpuswap run --seed overrides it)",
    ),
    (
        "device.preset",
        "preset name (gpuswap presets)",
        "gtx480",
        "the simulated GPU",
    ),
    (
        "device.vram_limit",
        "size: B, KiB, MiB, GiB",
        "all the preset has for tenants",
        "VRAM available to tenants (the driver's own VRAM not included)",
    ),
    (
        "device.memory_limit",
        "size: B, KiB, MiB, GiB",
        "unset",
        "instead of vram_limit: VRAM with the driver's own structures in it (the GPUswap papers' limit)",
    ),
    (
        "device.oversubscription",
        "ratio, at least 1 (1.5 = 150 %)",
        "unset",
        "instead of a VRAM limit: VRAM = the tenants' working set (what their programs allocate at most) over this, plus the runtime's own buffers",
    ),
    (
        "device.subscription",
        "ratio above 0 (0.75 = 75 %)",
        "unset",
        "instead of a VRAM limit: PILOT's filler allocation leaves VRAM = the tenants' working sets over this, plus the runtime's own buffers; below 1 leaves room to spare",
    ),
    (
        "device.sharing",
        "time-slice, mps, preemptive or exclusive-quantum",
        "preemptive where the preset has compute preemption (Pascal and later), else time-slice",
        "how tenants' kernels share the GPU: one whole kernel at a time round-robin (Fermi), at once (MPS), slices of the GPU's time that preempt a kernel mid-way (Pascal and later), or one tenant per quantum (nvshare's lock: the manager's turns that hold even when memory fits; not with [manager] gpu_time)",
    ),
    (
        "device.quantum",
        "duration: ns, us, ms, s",
        "30s",
        "exclusive-quantum: how long a tenant holds the GPU while others wait",
    ),
    (
        "device.time_slice",
        "duration: ns, us, ms, s",
        "2ms (assumed; gpuswap presets --json: time_slicing)",
        "preemptive: how long a process runs its kernels before the GPU preempts it for another with work",
    ),
    (
        "device.preemption_cost",
        "duration: ns, us, ms, s",
        "40us (assumed)",
        "preemptive: device time one preemption takes (the preempted context's state saved), in which no process runs",
    ),
    (
        "device.link_scale",
        "factor from 1/64 to 64",
        "1",
        "multiplies the host link's bandwidth in each direction (0.5 halves it, 2 doubles it; latency unchanged), as the adaptive-runtime paper's interconnect study does",
    ),
    (
        "device.host_memory",
        "size: B, KiB, MiB, GiB",
        "the preset's (gpuswap presets)",
        "host memory that can hold evicted or host-placed chunks; allocations fail beyond it",
    ),
    (
        "manager.mode",
        "mode name (gpuswap policies)",
        "native",
        "the memory manager",
    ),
    (
        "manager.chunk_size",
        "size, at least 4KiB",
        "4MiB",
        "unit of accounting and relocation",
    ),
    (
        "manager.return_interval",
        "duration: ns, us, ms, s",
        "50ms",
        "period of gpuswap's return check and of access-rate measurements",
    ),
    (
        "manager.gpu_time",
        "concurrent, turns or auto",
        "concurrent",
        "how tenants share the GPU's time: all at once, or, when the busy tenants' memory does not fit in VRAM, one holds the GPU with its memory in VRAM while the others wait (only the overflow moves at a handover), or auto: share while the busy tenants' measured progress together stays within 1.05 of one tenant's at its best, take turns otherwise, probing the other way at most 2 % of the time",
    ),
    (
        "manager.quantum",
        "auto, or duration: ns, us, ms, s",
        "auto",
        "turns: how long a holder keeps the GPU while others wait, times its weight; auto: the larger of 2 s and 20 handovers",
    ),
    (
        "manager.handover_after",
        "duration: ns, us, ms, s",
        "2s",
        "turns: a holder with no GPU work this long hands over early",
    ),
    (
        "manager.remote_cost",
        "number, at least 1",
        "the preset's VRAM over link bandwidth",
        "auto: what a remote read costs against a local one; auto shares first up to 16 (a Grace-Hopper-like link), takes turns first above (PCIe)",
    ),
    (
        "manager.idle",
        "keep or demote",
        "demote under turns and auto, keep under concurrent",
        "demote: under memory pressure a tenant idle for demote_after gives its VRAM back above its guarantee, in bulk; its next GPU work waits until its memory is back, hottest first",
    ),
    (
        "manager.demote_after",
        "duration: ns, us, ms, s",
        "5s",
        "idle = demote: how long a tenant is idle before it gives its memory back",
    ),
    (
        "manager.optimum",
        "true or false (mode uvm)",
        "false",
        "also compute Belady's bound on each tenant's page stream (optimum_pages_in; the stream is kept, 8 bytes a touch, up to 2^25 touches per tenant: past that the bound is skipped, optimum_skipped_touches)",
    ),
    (
        "scheduler.policy",
        "none, mfit, amfit or madvise",
        "none",
        "memory-aware kernel scheduling (PILOT): none starts every kernel at once (MPS); mfit waits for VRAM to hold a kernel's buffers; amfit preempts the kernel with the most migrated memory; madvise throttles a tenant beyond its quota to remote access",
    ),
    (
        "scheduler.instrumented",
        "true or false",
        "true unless policy = none",
        "kernels carry PILOT's preemption checks (run in segments, pay for each check); policy = none with true is PILOT without mitigation",
    ),
    (
        "scheduler.max_wait",
        "duration: ns, us, ms, s",
        "2s",
        "mfit and amfit: the most a kernel waits before the policy makes room for it (preempting) or runs it anyway",
    ),
    (
        "scheduler.quota",
        "size: B, KiB, MiB, GiB",
        "what the other running kernels' migrated memory leaves",
        "madvise: the migrated memory a tenant's kernel may have before its further memory is advised to the host",
    ),
    (
        "tenant.name",
        "text, at most 64 characters, unique",
        "the app's name and the tenant's index (backprop0)",
        "name in reports",
    ),
    (
        "tenant.app",
        "app name (gpuswap apps)",
        "required, unless trace or fault_log is set",
        "what the tenant runs",
    ),
    (
        "tenant.trace",
        "path to a PyTorch memory snapshot (.pickle), relative to the scenario",
        "unset",
        "replay torch.cuda.memory._dump_snapshot's allocator trace instead of an app (docs/traces.md)",
    ),
    (
        "tenant.trace_bandwidth",
        "number from 0 to 1",
        "0.5",
        "with trace: the share of the device's VRAM bandwidth the replayed kernels use alone (a snapshot does not record it)",
    ),
    (
        "tenant.fault_log",
        "path to a unified-memory fault log (uvm-eval's format), relative to the scenario",
        "unset",
        "with mode uvm: replay the logged fault batches' pages instead of an app, and report the simulated batches beside the logged ones (docs/traces.md)",
    ),
    (
        "tenant.size",
        "the app's input size (gpuswap apps APP)",
        "default",
        "input size of the app",
    ),
    (
        "tenant.repeat",
        "whole number, at least 1",
        "1",
        "how often the app's main computation runs",
    ),
    (
        "tenant.idle_between",
        "duration: ns, us, ms, s; or exp(DURATION), exponential times of that mean drawn from the seed",
        "unset: none",
        "idle time between repeats, after the repeat's GPU work is done (a notebook between cells, a server between bursts)",
    ),
    (
        "tenant.start",
        "duration: ns, us, ms, s",
        "0s",
        "when the tenant starts",
    ),
    (
        "tenant.priorities_file",
        "path, relative to the scenario; {app} stands for the app",
        "unset",
        "buffer and chunk priorities as written by gpuswap profile",
    ),
    (
        "tenant.priorities",
        "table: buffer label = whole number",
        "stack lowest, system buffers highest, others medium",
        "buffer priorities for the priority chunk policies (higher stays in VRAM longer)",
    ),
    (
        "tenant.chunk_priorities",
        "table: buffer label = list of whole numbers",
        "the buffer's priority",
        "per-chunk priorities (priority-chunk)",
    ),
    (
        "vm.name",
        "text, unique",
        "the workload's name and the VM's index (urbanterror0)",
        "VM scenarios: name in reports (count > 1 adds -0, -1, ...)",
    ),
    (
        "vm.workload",
        "workload name (gpuswap apps, vGPU workloads)",
        "required",
        "VM scenarios: what the VM runs on its vGPU",
    ),
    (
        "vm.high_memory",
        "size: B, KiB, MiB, GiB",
        "384MiB",
        "VM scenarios: the vGPU's high graphics memory (64 MiB slots on hd530)",
    ),
    (
        "vm.start",
        "duration: ns, us, ms, s",
        "0s",
        "VM scenarios: when the VM arrives",
    ),
    (
        "vm.duration",
        "duration: ns, us, ms, s",
        "required for frame workloads; jobs end when done",
        "VM scenarios: how long the VM stays",
    ),
    (
        "vm.count",
        "whole number, 1 to 1000",
        "1",
        "VM scenarios: this many VMs alike",
    ),
    (
        "sweep.runs",
        "whole number, at least 1",
        "1",
        "seeds per grid point (gpuswap sweep --runs overrides it)",
    ),
    (
        "sweep.vary",
        "table: key = [values] or \"FROM..TO step STEP\"",
        "unset",
        "the grid of gpuswap sweep (a single run runs the file's own values)",
    ),
];

/// Every scenario key: the fixed ones, then each mode's parameters (`manager.KEY`, once
/// per key even when several modes take it).
pub fn all() -> Vec<KeySpec> {
    let mut keys: Vec<KeySpec> = FIXED
        .iter()
        .map(|(path, value, default, help)| KeySpec {
            path: (*path).to_owned(),
            value: (*value).to_owned(),
            default: (*default).to_owned(),
            help: (*help).to_owned(),
        })
        .collect();
    for (key, value, default, help) in crate::contract_keys::KEYS {
        keys.push(KeySpec {
            path: format!("tenant.{key}"),
            value: value.to_owned(),
            default: default.to_owned(),
            help: format!("{help} ({})", crate::contract_keys::modes_text(key)),
        });
    }
    let placements: Vec<_> = gpuswap_core::placement::PLACEMENTS
        .iter()
        .map(|p| p.name)
        .collect();
    keys.push(KeySpec {
        path: "manager.placement".into(),
        value: placements.join(" | "),
        default: "gscale".into(),
        help: "VM scenarios: where vGPUs go in graphics memory".into(),
    });
    for entry in POLICIES {
        for param in entry.params {
            let path = format!("manager.{}", param.key);
            let value = match param.kind {
                ParamKind::Choice(options) => {
                    let names: Vec<_> = options().iter().map(|c| c.name).collect();
                    names.join(" | ")
                }
                ParamKind::Count => "whole number, at least 1".to_owned(),
            };
            // A key two modes share is listed once; one they spell alike but give other
            // values (gpuswap's and uvm's `victim`) once per mode.
            if keys.iter().any(|k| k.path == path && k.value == value) {
                continue;
            }
            let default = default_text(param.default);
            keys.push(KeySpec {
                path,
                value,
                default,
                help: format!("{} (mode {})", param.help, entry.choice.name),
            });
        }
    }
    keys
}

/// A mode parameter's default in words.
pub fn default_text(default: ParamDefault) -> String {
    match default {
        ParamDefault::Choice(name) => name.to_owned(),
        ParamDefault::TenantCount => {
            "the tenants' total weight (their number, without weights)".to_owned()
        }
        ParamDefault::Count(n) => n.to_string(),
    }
}

/// The keys of one section (`device`, `manager`, `tenant`), without the section.
pub fn in_section(section: &str) -> Vec<String> {
    all()
        .into_iter()
        .filter_map(|k| {
            k.path
                .strip_prefix(section)
                .and_then(|rest| rest.strip_prefix('.'))
                .map(str::to_owned)
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// A scenario template with every key, commented: what `gpuswap init` writes. Its
/// uncommented lines make a small oversubscribed scenario that runs as it is.
pub fn template() -> String {
    let t = Template { keys: all() };
    let mut out = String::from(
        "# A gpuswap scenario: two tenants that together want more VRAM than the device has.\n\
         # `gpuswap run FILE` runs it; `gpuswap compare FILE` runs it under every manager;\n\
         # `gpuswap keys` lists every key. Sizes take B, KiB, MiB, GiB; durations ns, us, ms, s.\n\n",
    );
    out += &t.set("seed", "42");
    out += "\n[device]\n";
    out += &t.set("device.preset", "\"gtx480\"");
    out += &t.set("device.vram_limit", "\"300MiB\"");
    out += &t.commented(&[
        ("device.memory_limit", "\"320MiB\""),
        ("device.host_memory", "\"16GiB\""),
        ("device.oversubscription", "1.5"),
        ("device.subscription", "0.75"),
        ("device.sharing", "\"mps\""),
        ("device.quantum", "\"30s\""),
        ("device.time_slice", "\"2ms\""),
        ("device.preemption_cost", "\"40us\""),
        ("device.link_scale", "0.5"),
    ]);
    out += "\n[manager]\n";
    out += &t.set("manager.mode", "\"gpuswap\"");
    out += &t.commented(&[
        ("manager.chunk_size", "\"4MiB\""),
        ("manager.return_interval", "\"50ms\""),
        ("manager.optimum", "true"),
        ("manager.gpu_time", "\"turns\""),
        ("manager.quantum", "\"auto\""),
        ("manager.handover_after", "\"2s\""),
        ("manager.remote_cost", "9"),
        ("manager.idle", "\"demote\""),
        ("manager.demote_after", "\"5s\""),
    ]);
    out += &t.mode_params();
    out += "\n# [scheduler]\n";
    out += &t.commented(&[
        ("scheduler.policy", "\"amfit\""),
        ("scheduler.instrumented", "true"),
        ("scheduler.max_wait", "\"2s\""),
        ("scheduler.quota", "\"8GiB\""),
    ]);
    out += &t.tenant("a", "backprop", "0s", true);
    out += &t.tenant("b", "hotspot", "20ms", false);
    out += "\n# A scenario for a virtualised integrated GPU has VMs instead of tenants (gpuswap\n\
            # run tells them apart by their [[vm]] tables), with preset = \"hd530\" and:\n";
    out += &t.commented(&[("manager.placement", "\"dymgpu-size\"")]);
    out += "# [[vm]]\n";
    out += &t.commented(&[
        ("vm.name", "\"game\""),
        ("vm.workload", "\"urbanterror\""),
        ("vm.high_memory", "\"384MiB\""),
        ("vm.start", "\"0s\""),
        ("vm.duration", "\"60s\""),
        ("vm.count", "11"),
    ]);
    out += "\n# For gpuswap sweep: a grid over any keys above.\n# [sweep]\n";
    out += &t.commented(&[
        ("sweep.runs", "5"),
        (
            "sweep.vary",
            "{ \"device.vram_limit\" = \"200MiB..500MiB step 100MiB\" }",
        ),
    ]);
    out
}

/// Writes the template's lines: each key under a comment that says what it sets.
struct Template {
    keys: Vec<KeySpec>,
}

impl Template {
    /// `path` set to `value`.
    fn set(&self, path: &str, value: &str) -> String {
        self.line(path, "", value)
    }

    /// Each of `keys` (path, example) commented out, with its example value.
    fn commented(&self, keys: &[(&str, &str)]) -> String {
        keys.iter()
            .map(|(path, example)| self.line(path, "# ", example))
            .collect()
    }

    /// The key at `path` under its comment, its line starting with `prefix`.
    fn line(&self, path: &str, prefix: &str, value: &str) -> String {
        let k = self.keys.iter().find(|k| k.path == path).expect("listed");
        let key = path.rsplit('.').next().expect("a path has a key");
        format!("{}{prefix}{key} = {value}\n", doc(k))
    }

    /// Every mode's own parameters, commented out, with an example value each.
    fn mode_params(&self) -> String {
        let mut out = String::new();
        for k in self.keys.iter().filter(|k| {
            k.path.starts_with("manager.")
                && k.path != "manager.placement"
                && !FIXED.iter().any(|(path, ..)| *path == k.path)
        }) {
            let key = k.path.trim_start_matches("manager.");
            let example = match k.default.parse::<u64>() {
                Ok(n) => n.to_string(),
                Err(_) if k.default.contains(' ') => "2".to_owned(),
                Err(_) => format!("\"{}\"", k.default),
            };
            out += &format!("{}# {key} = {example}\n", doc(k));
        }
        out
    }

    /// A `[[tenant]]` table; the `full` one shows every tenant key.
    fn tenant(&self, name: &str, app: &str, start: &str, full: bool) -> String {
        let mut out = "\n[[tenant]]\n".to_owned();
        out += &self.set("tenant.name", &format!("\"{name}\""));
        out += &self.set("tenant.app", &format!("\"{app}\""));
        if full {
            out += &self.commented(&[
                ("tenant.trace", "\"train.pickle\""),
                ("tenant.trace_bandwidth", "0.5"),
                ("tenant.fault_log", "\"faults.log\""),
            ]);
        }
        out += &self.commented(&[("tenant.size", "\"default\"")]);
        out += &self.set("tenant.repeat", "10");
        if full {
            out += &self.commented(&[("tenant.idle_between", "\"exp(20s)\"")]);
        }
        out += &self.set("tenant.start", &format!("\"{start}\""));
        if full {
            out += &self.commented(&[
                ("tenant.priorities_file", "\"priorities/{app}.toml\""),
                ("tenant.priorities", "{ input_units = 80 }"),
                ("tenant.chunk_priorities", "{ input_units = [80, 20] }"),
                ("tenant.vram_guarantee", "\"256MiB\""),
                ("tenant.vram_limit", "\"512MiB\""),
                ("tenant.memory_limit", "\"1GiB\""),
                ("tenant.at_limit", "\"spill\""),
                ("tenant.wait_timeout", "\"5s\""),
                ("tenant.host_limit", "\"2GiB\""),
                ("tenant.weight", "2"),
                ("tenant.priority_class", "1"),
            ]);
        }
        out
    }
}

/// A key's comment in the template: what it sets, what it takes, its default.
fn doc(k: &KeySpec) -> String {
    format!("# {}. {}; default: {}.\n", k.help, k.value, k.default)
}

/// The keys as a table for `gpuswap keys`.
pub fn table_rows() -> Vec<Vec<String>> {
    all()
        .into_iter()
        .map(|k| vec![k.path, k.value, k.default, k.help])
        .collect()
}
