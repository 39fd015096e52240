//! Built-in application models: the Rodinia programs of the GPUswap evaluation, the
//! workloads of the unified-memory and PILOT studies, and synthetic programs. Each app
//! lives in its own module with the reasoning behind its numbers; this module is the
//! registry and holds what the apps share.
//!
//! # Conventions every app follows
//!
//! **Program shape.** Allocations and initial host-to-device copies (setup, not
//! repeated), `PhaseStart`, `Repeat { times: repeat, body }` with the main computation
//! (launches, the copies the real program makes inside its main computation, a `Sync`
//! where it synchronizes), a `Sync` so that the phase ends when the GPU has done its
//! work (apps like lud only queue launches; their real program waits at the result's
//! copy), `PhaseEnd`, then the final device-to-host copies and a free of every buffer
//! (`phased`). The GPUswap evaluation repeated the main computation 100 times without
//! repeating the allocations. The runtime's system buffers (stack,
//! code, constants) are not part of an app; the engine adds them per tenant.
//!
//! **Traffic.** [`Access`] bytes are what a launch moves between the SMs and memory,
//! derived from the kernel's code, counted per thread block with no cache between
//! blocks:
//! - accesses of neighbouring threads to contiguous data coalesce and count their size,
//!   including halo elements re-read by neighbouring blocks (hotspot's overlapping tiles
//!   read about (16/12)^2 = 1.78 times the grid, as `spec/apps.md` says);
//! - an isolated read (a random or widely strided element) moves one whole cache line
//!   (`READ_LINE_BYTES`) and an isolated write one sector (`WRITE_SECTOR_BYTES`),
//!   the transaction sizes the timing model uses for remote accesses; isolated accesses
//!   in address order move each line once (`scattered_bytes`), those in random order
//!   move it again unless the device's L2 still holds it
//!   ([`DeviceShape::random_bytes`]);
//! - a buffer of at most a twelfth of the L2 ([`DeviceShape::l2_resident_bytes`], 64 KiB
//!   on the GTX 480) that every block re-reads (index tables, flags, small vectors)
//!   stays in the L2 and is read from memory once per launch
//!   ([`DeviceShape::l2_resident_reads`]);
//! - whatever the L2 serves again (the two rules above, and each app's own) is still
//!   counted beside the access (`Access::read_before_l2`, `Access::written_before_l2`):
//!   a line of host memory is not cached on the GPU, so in host memory every one of
//!   those accesses crosses the link (CUDA C++ Best Practices Guide, "Zero Copy").
//!
//! **Device.** [`AppModel::program`] receives the [`DeviceShape`] of the scenario's
//! preset: its L2 (the two estimates above) and its SM count. No app's numbers depend
//! on the SM count yet (see [`DeviceShape::sm_count`]); the apps take it so that models
//! of occupancy can use it without another change to every caller.
//!
//! **Compute.** `Kernel::ops` is the instructions executed summed over all threads,
//! estimated per thread from the kernel's code (a float division or square root counts
//! about 10 instructions, as it compiles to a reciprocal plus Newton steps on Fermi).
//! The GTX 480 preset runs 480 cores x 1.401 GHz = 672e9 of them per second and reads
//! VRAM at 177.4 GB/s, so a kernel is memory bound when it moves more than about 0.26
//! bytes per instruction. The estimates are good to a factor of about two; each module
//! says how it counted.
//!
//! **Sizes.** Every app accepts `"default"` (an input at the GPUswap evaluation's scale,
//! where one instance's buffers take roughly 100-250 MiB, except where the program's
//! footprint cannot scale), `"rodinia"` for the Rodinia apps (the run script's input) and
//! its main input parameter as a plain number; all of them are read by `parse_size`. The
//! apps of the unified-memory study (those with a [`PatternClass`]) also accept
//! `"uvmsmart"`, the input of the research simulator GPGPU-Sim UVM Smart
//! (`spec/uvm-driver.md`), and `"large"` (2 to 8 GiB of buffers); those the GPUswap
//! evaluation did not run have `"uvmsmart"` as their default. The benchmarks of the PILOT
//! study (`../shared/spec/pilot.md`) accept `"small"`, `"medium"` and `"large"`, the
//! inputs whose buffers take the memory of the study's table, with `"medium"` as their
//! default; those that were apps before (backprop, bfs, nn, 2dconv) keep their default,
//! and where `"large"` already named the unified-memory study's input (backprop, bfs,
//! 2dconv) it still does and PILOT's large input goes by number (their help says which).
//!
//! [`Access`]: crate::program::Access
//! [`DeviceShape`]: crate::device::DeviceShape
//! [`DeviceShape::random_bytes`]: crate::device::DeviceShape::random_bytes
//! [`DeviceShape::l2_resident_bytes`]: crate::device::DeviceShape::l2_resident_bytes
//! [`DeviceShape::l2_resident_reads`]: crate::device::DeviceShape::l2_resident_reads
//! [`DeviceShape::sm_count`]: crate::device::DeviceShape::sm_count

mod alloc;
mod atax;
mod backprop;
mod bfs;
mod common;
mod conv2d;
mod corr;
mod decode_step;
mod e2e;
mod fdtd2d;
mod gaussian;
mod gesummv;
mod heartwall;
mod hotspot;
mod hs3d;
mod lavamd;
mod lud;
mod matmul;
mod model;
mod nn;
mod nw;
mod pagedos;
mod partfilter;
mod pathfinder;
mod ra;
mod random;
mod srad_v1;
mod srad_v2;
mod sssp;
mod stream;
mod train_step;
mod transformer;

pub use model::{AppModel, PatternClass, SizeError};

/// Every built-in app, in the order `gpuswap apps` lists them.
pub fn all() -> Vec<&'static dyn AppModel> {
    vec![
        &conv2d::Conv2d,
        &atax::Atax,
        &backprop::Backprop,
        &bfs::Bfs,
        &corr::Corr,
        &fdtd2d::Fdtd2d,
        &gaussian::Gaussian,
        &gesummv::Gesummv,
        &heartwall::Heartwall,
        &hotspot::Hotspot,
        &hs3d::Hs3d,
        &lavamd::Lavamd,
        &lud::Lud,
        &nn::Nn,
        &nw::Nw,
        &pagedos::PageDos,
        &partfilter::Partfilter,
        &pathfinder::Pathfinder,
        &ra::Ra,
        &srad_v1::SradV1,
        &srad_v2::SradV2,
        &sssp::Sssp,
        &alloc::Alloc,
        &stream::Stream,
        &random::Random,
        &matmul::Matmul,
        &train_step::TrainStep,
        &decode_step::DecodeStep,
        &e2e::E2e,
    ]
}

/// The app called `name`.
pub fn find(name: &str) -> Option<&'static dyn AppModel> {
    all()
        .into_iter()
        .find(|a| a.name() == name || a.aliases().contains(&name))
}

/// Helpers the apps' tests share: structural checks and traffic sums over programs.
#[cfg(test)]
pub(crate) mod testing {
    use super::AppModel;
    use crate::device::DeviceShape;
    use crate::preset;
    use crate::program::{AccessOrder, Distribution, Kernel, Op, Program, Slot};

    /// The GPUswap testbed, the device the apps' figures were derived for.
    pub fn gtx480() -> DeviceShape {
        preset::find("gtx480").unwrap().shape()
    }

    /// The body of the measured phase, after checking the conventional shape: the
    /// program validates, and its top level holds `PhaseStart`, `Repeat { times: repeat }`,
    /// `Sync` and `PhaseEnd` in a row.
    pub fn phase_body(program: &Program, repeat: u32) -> &[Op] {
        program.validate().expect("the program validates");
        let start = program
            .ops
            .iter()
            .position(|op| *op == Op::PhaseStart)
            .expect("a measured phase");
        let Op::Repeat { times, body } = &program.ops[start + 1] else {
            panic!("the phase is one Repeat");
        };
        assert_eq!(*times, repeat, "the phase repeats `repeat` times");
        assert_eq!(program.ops[start + 2..start + 4], [Op::Sync, Op::PhaseEnd]);
        body
    }

    /// The kernels the phase body of `program` (run once) launches, in order.
    pub fn phase_kernels(program: &Program) -> Vec<&Kernel> {
        phase_body(program, 1)
            .iter()
            .filter_map(|op| match op {
                Op::Launch(k) => Some(k),
                _ => None,
            })
            .collect()
    }

    /// The order of `kernel`'s access to the buffer labelled `label`, if it has one.
    pub fn order_of(program: &Program, kernel: &Kernel, label: &str) -> Option<AccessOrder> {
        let slot = program.buffers.iter().position(|b| b.label == label)?;
        kernel
            .accesses
            .iter()
            .find(|a| a.slot == slot)
            .map(|a| a.order)
    }

    /// Kernel launches the ops make, loops unrolled.
    pub fn launches(ops: &[Op]) -> u64 {
        ops.iter()
            .map(|op| match op {
                Op::Launch(_) => 1,
                Op::Repeat { times, body } => u64::from(*times) * launches(body),
                _ => 0,
            })
            .sum()
    }

    /// Host time of the ops (`Op::Cpu`), loops unrolled.
    pub fn cpu_ns(ops: &[Op]) -> u64 {
        ops.iter()
            .map(|op| match op {
                Op::Cpu { ns } => *ns,
                Op::Repeat { times, body } => u64::from(*times) * cpu_ns(body),
                _ => 0,
            })
            .sum()
    }

    /// Bytes read and written per slot by the kernels of `ops`, loops unrolled.
    pub fn traffic(ops: &[Op], slots: usize) -> Vec<(u64, u64)> {
        let mut sums = vec![(0, 0); slots];
        for op in ops {
            match op {
                Op::Launch(kernel) => {
                    for a in &kernel.accesses {
                        sums[a.slot].0 += a.read_bytes;
                        sums[a.slot].1 += a.write_bytes;
                    }
                }
                Op::Repeat { times, body } => {
                    for (sum, (r, w)) in sums.iter_mut().zip(traffic(body, slots)) {
                        sum.0 += u64::from(*times) * r;
                        sum.1 += u64::from(*times) * w;
                    }
                }
                _ => {}
            }
        }
        sums
    }

    /// Bytes read and written per byte of each buffer in one pass of the phase body:
    /// the accesses per page the GPUswap profiles compare, up to a constant.
    pub fn per_byte(program: &Program, repeat: u32) -> Vec<f64> {
        let body = phase_body(program, repeat);
        traffic(body, program.buffers.len())
            .iter()
            .zip(&program.buffers)
            .map(|((r, w), b)| (r + w) as f64 / b.bytes as f64)
            .collect()
    }

    /// Traffic of `slot` in `ops` per byte of each of `bins` equal parts of the buffer,
    /// spreading each access over the buffer as its distribution says.
    pub fn density(program: &Program, ops: &[Op], slot: Slot, bins: usize) -> Vec<f64> {
        let size = program.buffers[slot].bytes as f64;
        let bin = size / bins as f64;
        let mut out = vec![0.0; bins];
        // Adds `bytes` of traffic spread evenly over [from, to).
        let spread = |out: &mut Vec<f64>, from: f64, to: f64, bytes: f64| {
            for (i, v) in out.iter_mut().enumerate() {
                let (lo, hi) = (i as f64 * bin, (i + 1) as f64 * bin);
                let overlap = (to.min(hi) - from.max(lo)).max(0.0);
                *v += bytes * overlap / (to - from) / bin;
            }
        };
        fn walk(ops: &[Op], slot: Slot, times: f64, f: &mut dyn FnMut(&Distribution, f64)) {
            for op in ops {
                match op {
                    Op::Launch(k) => {
                        for a in k.accesses.iter().filter(|a| a.slot == slot) {
                            f(
                                &a.distribution,
                                times * (a.read_bytes + a.write_bytes) as f64,
                            );
                        }
                    }
                    Op::Repeat { times: t, body } => walk(body, slot, times * f64::from(*t), f),
                    _ => {}
                }
            }
        }
        walk(
            ops,
            slot,
            1.0,
            &mut |distribution, bytes| match distribution {
                Distribution::Uniform => spread(&mut out, 0.0, size, bytes),
                Distribution::Ranges(ranges) => {
                    let total: f64 = ranges.iter().map(|r| r.weight).sum();
                    for r in ranges {
                        let from = r.offset_bytes as f64;
                        spread(
                            &mut out,
                            from,
                            from + r.bytes as f64,
                            bytes * r.weight / total,
                        );
                    }
                }
                Distribution::Profile {
                    page_bytes,
                    weights,
                } => {
                    let total: f64 = weights.iter().sum();
                    for (i, w) in weights.iter().enumerate() {
                        let from = (i as u64 * page_bytes) as f64;
                        let to = (from + *page_bytes as f64).min(size);
                        spread(&mut out, from, to, bytes * w / total);
                    }
                }
            },
        );
        out
    }

    /// Checks what every app's program must satisfy at `size` and returns the program
    /// with one repetition: it validates, has the conventional shape, frees everything,
    /// and `repeat` multiplies the phase and nothing else.
    pub fn check_app(app: &dyn AppModel, size: &str) -> Program {
        let once = app
            .program(size, 1, gtx480())
            .expect("the size is accepted");
        let thrice = app
            .program(size, 3, gtx480())
            .expect("the size is accepted");
        // An endless app repeats its phase until the others end, whatever `repeat` says.
        let times = |repeat: u32| if app.endless() { u32::MAX } else { repeat };
        let body = phase_body(&once, times(1));
        assert_eq!(
            body,
            phase_body(&thrice, times(3)),
            "the body does not depend on repeat"
        );
        assert!(launches(body) > 0, "the phase launches kernels");
        if !app.endless() {
            assert_eq!(
                launches(&thrice.ops) - launches(&once.ops),
                2 * launches(body),
                "repeat multiplies the phase"
            );
        }
        // Outside the phase both programs are the same.
        let outside = |p: &Program| -> Vec<Op> {
            p.ops
                .iter()
                .filter(|op| !matches!(op, Op::Repeat { .. }))
                .cloned()
                .collect()
        };
        assert_eq!(outside(&once), outside(&thrice));
        assert_eq!(once.buffers, thrice.buffers);
        once
    }

    /// Checks that `size` is rejected with a message naming the problem and the
    /// accepted forms.
    pub fn rejects(app: &dyn AppModel, size: &str, fragment: &str) {
        let err = app
            .program(size, 1, gtx480())
            .expect_err("the size is rejected");
        assert_eq!(err.app, app.name());
        assert!(err.message.contains(fragment), "{fragment:?} in {err}");
        assert!(
            err.message.contains("default"),
            "accepted forms listed in {err}"
        );
    }

    /// Instructions per byte `kernel` moves.
    pub fn ops_per_byte(kernel: &Kernel) -> f64 {
        let bytes: u64 = kernel
            .accesses
            .iter()
            .map(|a| a.read_bytes + a.write_bytes)
            .sum();
        kernel.ops as f64 / bytes as f64
    }

    /// Footprint in MiB.
    pub fn mib(program: &Program) -> f64 {
        program.peak_allocated_bytes() as f64 / f64::from(1 << 20)
    }

    /// Checks that each size's buffers take the MiB PILOT's table lists for it
    /// (`../shared/spec/pilot.md`, read in binary units) within `tolerance` (0.1 for
    /// 10 %).
    pub fn assert_pilot_memory(app: &dyn AppModel, sizes: &[(&str, f64)], tolerance: f64) {
        for &(size, table_mib) in sizes {
            let footprint = mib(&check_app(app, size));
            let off = footprint / table_mib - 1.0;
            assert!(
                off.abs() < tolerance,
                "{} {size}: {footprint:.2} MiB, {off:+.4} off the table's {table_mib}",
                app.name()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::common::parse_size;
    use super::testing::{check_app, gtx480, launches, mib, rejects, traffic};
    use super::*;
    use crate::device::DeviceShape;

    /// Every registered app is found by its name, and no name is taken twice.
    #[test]
    fn registry_finds_every_app_by_a_unique_name() {
        let names: Vec<_> = all().iter().map(|a| a.name()).collect();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for name in names {
            assert_eq!(find(name).map(|a| a.name()), Some(name));
        }
        assert!(find("no-such-app").is_none());
        for app in all() {
            assert!(!app.description().is_empty() && !app.description().contains('\n'));
            assert!(app.sizes_help().contains("default"), "{}", app.name());
        }
    }

    #[test]
    fn defaults_are_at_evaluation_scale_and_keep_launches_bounded() {
        for app in all() {
            let program = check_app(app, "default");
            let footprint = mib(&program);
            // heartwall's buffers are fixed by its video and 51 tracked points; alloc is
            // the fairness test's 2 GB leak; an app whose default is the unified-memory
            // research simulator's input (its `uvmsmart` size) has that input's MBs.
            let research = app
                .program("uvmsmart", 1, gtx480())
                .is_ok_and(|p| p == program);
            // A PILOT benchmark's default is its medium input, up to 1 GB in the table.
            let pilot = app
                .program("medium", 1, gtx480())
                .is_ok_and(|p| p == program);
            let expected = match app.name() {
                "heartwall" => 30.0..=60.0,
                "alloc" => 1800.0..=2000.0,
                // pageDoS's buffer: our 1 GiB (the paper gives none).
                "pagedos" => 1024.0..=1024.0,
                // A transformer's steps: a real model's weights (GPT-2's 124 M for
                // training, OPT-1.3B's 1.3 B for decoding), a few GiB.
                "train-step" | "decode-step" => 2000.0..=4000.0,
                _ if research => 1.0..=160.0,
                _ if pilot => 100.0..=1100.0,
                _ => 100.0..=250.0_f64,
            };
            assert!(
                expected.contains(&footprint),
                "{}: {footprint:.1} MiB",
                app.name()
            );
            // gaussian launches two kernels per pivot row as its program does, 16 382 at
            // its default.
            let bound = if app.name() == "gaussian" {
                2_000_000
            } else {
                100_000
            };
            let total = launches(&app.program("default", 100, gtx480()).unwrap().ops);
            assert!(
                total <= bound || app.endless(),
                "{}: {total} launches",
                app.name()
            );
        }
    }

    #[test]
    fn apps_that_read_through_the_l2_move_less_on_a_larger_one() {
        // No L2 at all, the GTX 480's 768 KiB and the GH200's 60 MiB.
        let testbed = gtx480();
        let none = DeviceShape {
            l2_bytes: 0,
            ..testbed
        };
        let large = crate::preset::find("gh200").unwrap().shape();
        let mut depends = Vec::new();
        for app in all() {
            let moved = |device| -> u64 {
                let program = app.program("default", 1, device).unwrap();
                traffic(&program.ops, program.buffers.len())
                    .iter()
                    .map(|(read, write)| read + write)
                    .sum()
            };
            let (without, small, big) = (moved(none), moved(testbed), moved(large));
            assert!(
                without >= small && small >= big,
                "{}: {without} {small} {big}",
                app.name()
            );
            if without > big {
                depends.push(app.name());
            }
            // Random-order re-reads hit the larger L2: bfs's 4 MiB flag arrays fit in
            // the GH200's, and it holds 47 % of random's 128 MiB table.
            if ["bfs", "random"].contains(&app.name()) {
                assert!(big < small * 9 / 10, "{}: {small} {big}", app.name());
            }
        }
        // Small tables that every block reads stay in any L2 but none; lud's band tiles,
        // lavamd's neighbour boxes, gaussian's strips and partfilter's CDF stay in one
        // that holds their reuse distance; ra's 4 MiB table and output, touched at
        // random, fit in the GH200's, as do sssp's 4 MiB of updating distances under
        // its atomics.
        assert_eq!(
            depends,
            [
                "atax",
                "backprop",
                "bfs",
                "corr",
                "fdtd-2d",
                "gaussian",
                "gesummv",
                "heartwall",
                "lavamd",
                "lud",
                "partfilter",
                "ra",
                "srad_v1",
                "sssp",
                "random"
            ]
        );
    }

    #[test]
    fn sm_utilization_is_a_share_and_pilots_table_for_its_benchmarks() {
        for app in all() {
            let share = app.sm_utilization();
            assert!(share > 0.0 && share <= 1.0, "{}: {share}", app.name());
        }
        // PILOT's table, by its names.
        for (name, share) in [
            ("backprop", 1.0),
            ("bfs", 1.0),
            ("hs3d", 0.75),
            ("partfilter", 0.63),
            ("lavamd", 0.56),
            ("nn", 1.0),
            ("gaussian", 1.0),
            ("corr", 0.63),
            ("gesummv", 1.0),
            ("2dconvol", 1.0),
        ] {
            assert_eq!(find(name).unwrap().sm_utilization(), share, "{name}");
        }
    }

    #[test]
    fn every_app_rejects_garbage_with_the_accepted_forms() {
        for app in all() {
            rejects(app, "bogus", "not a size");
            rejects(app, "", "not a size");
        }
    }

    #[test]
    fn sizes_parse_names_and_numbers_alike() {
        let named = [("default", 7u64), ("rodinia", 3)];
        let even = |n: u64| {
            if n.is_multiple_of(2) {
                Ok(n)
            } else {
                Err("must be even".into())
            }
        };
        assert_eq!(parse_size("x", "forms", "default", &named, even), Ok(7));
        assert_eq!(parse_size("x", "forms", " rodinia ", &named, even), Ok(3));
        assert_eq!(parse_size("x", "forms", "42", &named, even), Ok(42));
        let err = parse_size("x", "forms", "41", &named, even).unwrap_err();
        assert_eq!(err.message, "\"41\": must be even; expected forms");
        let err = parse_size("x", "forms", "4e2", &named, even).unwrap_err();
        assert_eq!(err.message, "\"4e2\" is not a size; expected forms");
        let err = parse_size("x", "forms", "99999999999999999999999", &named, even).unwrap_err();
        assert!(err.message.contains("too large"), "{err}");
    }
}
