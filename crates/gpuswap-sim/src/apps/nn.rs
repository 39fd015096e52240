//! Rodinia `nn`: distance of every hurricane record to a query point, for a k-nearest
//! neighbour search finished on the host.
//!
//! # The real program (Rodinia 3.1, `cuda/nn`)
//! Buffers, in allocation order: `locations` ({lat, lng} floats, 8 B per record) and
//! `distances` (one float per record): 12 B per record, 0.51 MB for the script's 42,764
//! records (`spec/apps.md`). Copies: H2D locations, then one launch of `euclid` (one
//! thread per record, 256 per block), a synchronization, D2H distances; the host then
//! selects the nearest records. The phase body is that whole computation: the upload,
//! the launch, its synchronization and the download.
//!
//! # Traffic (derived, see the conventions in [`super`])
//! Each thread reads its 8-byte record and writes its 4-byte distance, consecutive
//! threads on consecutive records: the input (2/3 of the footprint) is read once and
//! only read, the output (1/3) written once and only written, so both get one access per
//! byte, the equal accesses per page of the GPUswap profiles.
//!
//! # Sizes
//! `default` is at the GPUswap evaluation's scale (2^24 records, 192 MiB), `rodinia` the
//! run script's 42 764 records. For the PILOT study (`../shared/spec/pilot.md`, one of
//! its ten benchmarks) `small`, `medium` and `large` are 4, 40 and 400 million records:
//! 45.78 MiB, 457.76 MiB and 4.47 GiB, the 45.8 MB, 457.8 MB and 4.5 GB of its table
//! read in binary units (0.05 %, 0.01 % and 0.6 % under; exactly 12 bytes a record, so
//! those are the table's inputs). A plain number is the records, up to 2^29 (6 GiB).
//!
//! # Compute
//! About 25 instructions per thread (index arithmetic 6, bound test, two loads, two
//! differences, two multiply-adds, a square root ~8, the store): about 2 instructions
//! per byte where the GTX 480 model balances at 3.8, so memory bound.

use super::common::{d2h, h2d, parse_size, phased, uniform, within};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, Program};

/// The nn app.
pub struct Nn;

const HELP: &str = "default (16777216 records, 192 MiB), rodinia (42764 records, 0.51 MB), \
                    small (4000000 records, 45.8 MiB, PILOT's 45.8 MB), medium (40000000, \
                    457.8 MiB, PILOT's 457.8 MB), large (400000000, 4.47 GiB, PILOT's \
                    4.5 GB), or a number of records (1 to 536870912)";
/// Bytes per record of input ({lat, lng}) and of output (the distance).
const RECORD_BYTES: u64 = 8;
const DISTANCE_BYTES: u64 = 4;
/// Threads per block.
const BLOCK: u64 = 256;
/// Instructions per thread of `euclid`, and of a thread past the last record.
const OPS_PER_THREAD: u64 = 25;
const IDLE_OPS_PER_THREAD: u64 = 8;
/// PILOT's small, medium and large inputs (module doc).
const SMALL_RECORDS: u64 = 4_000_000;
const MEDIUM_RECORDS: u64 = 40_000_000;
const LARGE_RECORDS: u64 = 400_000_000;
/// Largest input accepted: 6 GiB of buffers.
const MAX_RECORDS: u64 = 1 << 29;

impl AppModel for Nn {
    fn name(&self) -> &'static str {
        "nn"
    }

    fn description(&self) -> &'static str {
        "Rodinia nn: Euclidean distance of every record to a point (read-only input, write-only output)"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        let named = [
            ("default", 1 << 24),
            ("rodinia", 42_764),
            ("small", SMALL_RECORDS),
            ("medium", MEDIUM_RECORDS),
            ("large", LARGE_RECORDS),
        ];
        let records = parse_size(self.name(), HELP, size, &named, |n| {
            within(n, 1..=MAX_RECORDS, format!("{n} records"))
        })?;
        Ok(program(records, repeat))
    }
}

fn program(records: u64, repeat: u32) -> Program {
    let mut p = Program::default();
    let input_bytes = records * RECORD_BYTES;
    let output_bytes = records * DISTANCE_BYTES;
    let locations = p.buffer("locations", input_bytes);
    let distances = p.buffer("distances", output_bytes);
    let idle_threads = records.div_ceil(BLOCK) * BLOCK - records;
    let euclid = Kernel {
        name: "euclid".into(),
        ops: records * OPS_PER_THREAD + idle_threads * IDLE_OPS_PER_THREAD,
        accesses: vec![
            uniform(locations, input_bytes, 0, AccessOrder::Linear),
            uniform(distances, 0, output_bytes, AccessOrder::Linear),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    };
    let setup = vec![Op::Alloc(locations), Op::Alloc(distances)];
    let body = vec![
        h2d(locations, input_bytes),
        Op::Launch(euclid),
        Op::Sync,
        d2h(distances, output_bytes),
    ];
    let teardown = vec![Op::Free(locations), Op::Free(distances)];
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::assert_pilot_memory;
    use crate::apps::testing::{check_app, gtx480, mib, per_byte, phase_body, rejects, traffic};

    #[test]
    fn footprint_is_twelve_bytes_per_record() {
        let p = check_app(&Nn, "rodinia");
        assert_eq!(p.peak_allocated_bytes(), 12 * 42_764);
        assert!((p.peak_allocated_bytes() as f64 / 1e6 - 0.51).abs() < 0.01);
        assert_eq!(mib(&check_app(&Nn, "default")), 192.0);
    }

    #[test]
    fn input_is_two_thirds_read_only_output_one_third_write_only() {
        let p = Nn.program("default", 1, gtx480()).unwrap();
        let (input, output) = (p.buffers[0].bytes, p.buffers[1].bytes);
        assert_eq!(input, 2 * output);
        let t = traffic(phase_body(&p, 1), 2);
        assert_eq!(t[0], (input, 0), "input read only");
        assert_eq!(t[1], (0, output), "output written only");
        let d = per_byte(&p, 1);
        assert_eq!(d[0], d[1], "equal accesses per byte");
    }

    #[test]
    fn memory_bound() {
        let p = Nn.program("default", 1, gtx480()).unwrap();
        let Some(Op::Launch(k)) = phase_body(&p, 1)
            .iter()
            .find(|op| matches!(op, Op::Launch(_)))
        else {
            panic!("a launch")
        };
        assert!(k.ops as f64 / 672e9 < 0.7 * (12u64 << 24) as f64 / 177.4e9);
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Nn, "0", "1 to");
        rejects(&Nn, "600000000", "1 to");
        rejects(&Nn, "filelist_4", "not a size");
    }

    #[test]
    fn pilot_sizes_take_the_memory_of_its_table() {
        let table = [("small", 45.8), ("medium", 457.8), ("large", 4.5 * 1024.0)];
        assert_pilot_memory(&Nn, &table, 0.01);
        assert_eq!(
            check_app(&Nn, "large").peak_allocated_bytes(),
            12 * 400_000_000
        );
    }
}
