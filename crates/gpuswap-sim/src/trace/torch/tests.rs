use serde_pickle::{DeOptions, HashableValue, Value};

use super::*;
use crate::trace::synthetic::{self, SnapshotBuilder};

const MIB: u64 = 1 << 20;

/// The bytes each launch of `program` reads.
fn reads(program: &Program) -> Vec<u64> {
    program
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Launch(k) => Some(k.accesses.iter().map(|a| a.read_bytes).sum()),
            _ => None,
        })
        .collect()
}

/// `pickle` with `change` made to its top-level dict.
fn edited(pickle: &[u8], change: impl FnOnce(&mut BTreeMap<HashableValue, Value>)) -> Vec<u8> {
    let mut value = serde_pickle::value_from_slice(pickle, DeOptions::new()).unwrap();
    let Value::Dict(d) = &mut value else {
        panic!("a dict")
    };
    change(d);
    serde_pickle::value_to_vec(&value, serde_pickle::SerOptions::new()).unwrap()
}

/// The events of the first device's trace in `snapshot`.
fn events(snapshot: &mut BTreeMap<HashableValue, Value>) -> &mut Vec<Value> {
    let Some(Value::List(traces)) =
        snapshot.get_mut(&HashableValue::String("device_traces".into()))
    else {
        panic!("device_traces")
    };
    let Value::List(events) = &mut traces[0] else {
        panic!("a list")
    };
    events
}

fn key(name: &str) -> HashableValue {
    HashableValue::String(name.into())
}

#[test]
fn a_replay_holds_the_peak_the_snapshot_records() {
    for builder in [synthetic::training(), synthetic::inference()] {
        let snapshot = Snapshot::parse(&builder.pickle()).unwrap();
        assert!(!snapshot.trace.is_empty());
        let program = snapshot.program(1.0).unwrap();
        program.validate().unwrap();
        assert_eq!(program.peak_allocated_bytes(), builder.peak_bytes());
        assert_eq!(
            snapshot.peak_reserved_bytes().unwrap(),
            builder.peak_bytes()
        );
    }
}

#[test]
fn the_trace_paces_the_program_and_kernels_read_the_live_blocks() {
    let mut b = SnapshotBuilder::new();
    let seg = b.segment(64 * MIB);
    let x = b.alloc(seg, 0, 16 * MIB);
    b.wait_us(1_000);
    b.alloc(seg, 16 * MIB, 8 * MIB);
    b.wait_us(500);
    b.free(seg, x);
    // 64 KiB per microsecond.
    let program = Snapshot::parse(&b.pickle())
        .unwrap()
        .program(65_536.0)
        .unwrap();
    let waited: u64 = program
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Cpu { ns } => Some(*ns),
            _ => None,
        })
        .sum();
    assert_eq!(waited, 1_500_000);
    let reads = reads(&program);
    // Only intervals in which time passed have work: 1 ms at 64 KiB/us, then 0.5 ms.
    assert_eq!(reads, vec![1_000 * 65_536, 500 * 65_536]);
}

#[test]
fn without_times_each_event_reads_the_live_blocks_once() {
    let mut b = SnapshotBuilder::new();
    let seg = b.segment(64 * MIB);
    let x = b.alloc(seg, 0, 16 * MIB);
    b.alloc(seg, 16 * MIB, 8 * MIB);
    b.free(seg, x);
    let bytes = edited(&b.pickle(), |d| {
        for e in events(d) {
            let Value::Dict(e) = e else { panic!("a dict") };
            e.remove(&key("time_us"));
        }
    });
    let program = Snapshot::parse(&bytes).unwrap().program(65_536.0).unwrap();
    let reads = reads(&program);
    // 16 MiB live once x is allocated, 24 with y, 8 once x's free is requested.
    assert_eq!(reads, vec![16 * MIB, 24 * MIB, 8 * MIB]);
    assert!(!program.ops.iter().any(|op| matches!(op, Op::Cpu { .. })));
}

#[test]
fn a_snapshot_without_a_trace_is_a_static_footprint() {
    let mut b = SnapshotBuilder::new();
    let seg = b.segment(32 * MIB);
    b.alloc(seg, 0, 8 * MIB);
    let bytes = edited(&b.pickle(), |d| {
        d.remove(&key("device_traces"));
    });
    let program = Snapshot::parse(&bytes).unwrap().program(1.0).unwrap();
    program.validate().unwrap();
    assert_eq!(program.peak_allocated_bytes(), 32 * MIB);
    let launches: Vec<&Kernel> = program
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Launch(k) => Some(k),
            _ => None,
        })
        .collect();
    assert_eq!(launches.len(), 1);
    assert_eq!(launches[0].accesses[0].read_bytes, 8 * MIB);
}

#[test]
fn segments_held_before_recording_began_are_allocated_at_the_start() {
    let mut b = SnapshotBuilder::new();
    let early = b.segment(16 * MIB);
    let later = b.segment(4 * MIB);
    b.alloc(later, 0, MIB);
    // Drop the early segment's segment_alloc, as a trace begun late would.
    let bytes = edited(&b.pickle(), |d| {
        events(d).remove(0);
    });
    let program = Snapshot::parse(&bytes).unwrap().program(1.0).unwrap();
    program.validate().unwrap();
    assert_eq!(program.ops[0], Op::Alloc(0));
    assert_eq!(program.buffers[0].label, format!("segment@{early:#x}"));
    assert_eq!(program.peak_allocated_bytes(), 20 * MIB);
}

#[test]
fn malformed_truncated_and_code_bearing_pickles_are_refused() {
    let good = synthetic::inference().pickle();
    let truncated = Snapshot::parse(&good[..good.len() / 2]).unwrap_err();
    assert!(matches!(truncated, SnapshotError::Pickle(_)), "{truncated}");
    let garbage = Snapshot::parse(b"not a pickle").unwrap_err();
    assert!(matches!(garbage, SnapshotError::Pickle(_)), "{garbage}");
    // cos.system\n(S'echo hi'\ntR. : a call of os.system on load.
    let code = Snapshot::parse(b"cos\nsystem\n(S'echo hi'\ntR.").unwrap_err();
    assert!(code.to_string().contains("names Python code"), "{code}");
    // A list where the top-level dict belongs, and an event without a size.
    let list = serde_pickle::value_to_vec(&Value::List(vec![]), Default::default()).unwrap();
    assert_eq!(
        Snapshot::parse(&list).unwrap_err().to_string(),
        "snapshot: expected a dict"
    );
    let bytes = edited(&good, |d| {
        let Value::Dict(e) = &mut events(d)[3] else {
            panic!("a dict")
        };
        e.remove(&key("size"));
    });
    assert_eq!(
        Snapshot::parse(&bytes).unwrap_err().to_string(),
        "device_traces[0][3].size: expected a value (the key is missing)"
    );
}

#[test]
fn a_block_outside_every_segment_is_an_inconsistent_trace() {
    let mut b = SnapshotBuilder::new();
    let seg = b.segment(4 * MIB);
    b.alloc(seg, 0, MIB);
    let bytes = edited(&b.pickle(), |d| {
        d.remove(&key("segments"));
        events(d).remove(0);
    });
    let e = Snapshot::parse(&bytes).unwrap().program(1.0).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("device_traces[0][0]: alloc of 1048576 bytes"),
        "{e}"
    );
}

/// A snapshot as Python's own pickler writes it (protocol 4, memoized objects): every
/// event and block shares one `frames` list, as PyTorch shares stack frames. Made by
/// `pickle.dumps` of a dict with one 4 MiB segment at 0x1000000, a 1 MiB block in use
/// at its start, and a second 1 MiB block allocated and freed.
const PYTHON_PICKLE_HEX: [&str; 12] = [
    "800495fb010000000000007d94288c087365676d656e7473945d947d94288c06646576696365944b008c0761",
    "646472657373944a000000018c0a746f74616c5f73697a65944a000040008c0e616c6c6f63617465645f7369",
    "7a65944a000010008c06626c6f636b73945d94287d94288c0473697a65944a000010008c057374617465948c",
    "106163746976655f616c6c6f6361746564948c066672616d6573945d947d94288c0866696c656e616d65948c",
    "08747261696e2e7079948c046c696e65944b0c8c046e616d65948c07666f7277617264947561757d9428680b",
    "4a00003000680c8c08696e61637469766594680e680f756575618c0d6465766963655f747261636573945d94",
    "5d94287d94288c06616374696f6e948c0d7365676d656e745f616c6c6f63948c0461646472944a0000000168",
    "0b4a000040008c0673747265616d944b008c0774696d655f7573944b0a680e680f757d9428681c8c05616c6c",
    "6f6394681e4a00000001680b4a00001000681f4b0068204b14680e680f757d9428681c6822681e4a00001001",
    "680b4a00001000681f4b0068204b1e680e680f757d9428681c8c0e667265655f72657175657374656494681e",
    "4a00001001680b4a00001000681f4b0068204b28680e680f757d9428681c8c0e667265655f636f6d706c6574",
    "656494681e4a00001001680b4a00001000681f4b0068204b28680e680f756561752e",
];

fn python_pickle() -> Vec<u8> {
    let hex: String = PYTHON_PICKLE_HEX.concat();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn a_pickle_from_python_with_shared_frames_replays() {
    let snapshot = Snapshot::parse(&python_pickle()).unwrap();
    assert_eq!(snapshot.trace.len(), 5);
    assert_eq!(snapshot.segments[0].active, vec![(0, MIB)]);
    let program = snapshot.program(1.0).unwrap();
    program.validate().unwrap();
    assert_eq!(program.peak_allocated_bytes(), 4 * MIB);
}

#[test]
fn nesting_of_any_depth_is_an_error_not_a_crash() {
    let bytes = crate::trace::pickle_scan::nested_lists(200_000);
    let e = Snapshot::parse(&bytes).unwrap_err();
    assert_eq!(e.to_string(), "snapshot: expected a dict");
}

#[test]
fn only_the_replayed_devices_segments_count() {
    let mut b = SnapshotBuilder::new();
    let seg = b.segment(8 * MIB);
    b.alloc(seg, 0, MIB);
    let bytes = edited(&b.pickle(), |d| {
        // The trace moves to device 1; device 0 keeps a 1 GiB segment of its own.
        let Some(Value::List(traces)) = d.get_mut(&key("device_traces")) else {
            panic!("device_traces")
        };
        traces.insert(0, Value::List(Vec::new()));
        let Some(Value::List(segments)) = d.get_mut(&key("segments")) else {
            panic!("segments")
        };
        let Value::Dict(mine) = &mut segments[0] else {
            panic!("a dict")
        };
        mine.insert(key("device"), Value::I64(1));
        let mut other = mine.clone();
        other.insert(key("device"), Value::I64(0));
        other.insert(key("address"), Value::I64(0x10_0000_0000));
        other.insert(key("total_size"), Value::I64(1 << 30));
        segments.push(Value::Dict(other));
    });
    let snapshot = Snapshot::parse(&bytes).unwrap();
    assert_eq!(snapshot.device, 1);
    assert_eq!(snapshot.segments.len(), 1);
    assert_eq!(
        snapshot.program(1.0).unwrap().peak_allocated_bytes(),
        8 * MIB
    );
}

#[test]
fn kernels_read_the_live_blocks_not_the_cached_free_space() {
    let mut b = SnapshotBuilder::new();
    let seg = b.segment(1024 * MIB);
    b.alloc(seg, 512 * MIB, 4 * MIB);
    b.wait_us(10);
    b.alloc(seg, 0, MIB);
    let program = Snapshot::parse(&b.pickle()).unwrap().program(1.0).unwrap();
    let Some(Op::Launch(k)) = program.ops.iter().find(|op| matches!(op, Op::Launch(_))) else {
        panic!("a kernel")
    };
    let Distribution::Ranges(ranges) = &k.accesses[0].distribution else {
        panic!("ranges")
    };
    assert_eq!(ranges.len(), 1);
    assert_eq!(
        (ranges[0].offset_bytes, ranges[0].bytes),
        (512 * MIB, 4 * MIB)
    );
}

#[test]
fn expandable_segments_hold_blocks_across_mappings_and_refuse_partial_unmaps() {
    let events = |actions: &[(&str, u64, u64)]| {
        let trace = actions
            .iter()
            .map(|&(action, addr, size)| {
                Value::Dict(BTreeMap::from([
                    (key("action"), Value::String(action.into())),
                    (key("addr"), Value::I64(addr as i64)),
                    (key("size"), Value::I64(size as i64)),
                ]))
            })
            .collect();
        let top = Value::Dict(BTreeMap::from([(
            key("device_traces"),
            Value::List(vec![Value::List(trace)]),
        )]));
        serde_pickle::value_to_vec(&top, serde_pickle::SerOptions::new()).unwrap()
    };
    let base = 0x4000_0000;
    let spanning = events(&[
        ("segment_map", base, 2 * MIB),
        ("segment_map", base + 2 * MIB, 2 * MIB),
        ("alloc", base + MIB, 2 * MIB),
        ("free_requested", base + MIB, 2 * MIB),
        ("segment_unmap", base, 4 * MIB),
    ]);
    let program = Snapshot::parse(&spanning).unwrap().program(1.0).unwrap();
    program.validate().unwrap();
    assert_eq!(program.peak_allocated_bytes(), 4 * MIB);
    assert_eq!(reads(&program), vec![2 * MIB]);
    let partial = events(&[
        ("segment_map", base, 4 * MIB),
        ("segment_unmap", base, 2 * MIB),
    ]);
    let e = Snapshot::parse(&partial).unwrap().program(1.0).unwrap_err();
    assert!(
        e.to_string().contains("partial unmaps are not replayed"),
        "{e}"
    );
}

proptest::proptest! {
    /// Whatever the bytes, reading them ends in a snapshot or an error, never a panic or
    /// an overflow; bytes cut from a real snapshot included.
    #[test]
    fn any_bytes_read_to_a_snapshot_or_an_error(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        cut in 0usize..600,
        flip in 0usize..600,
    ) {
        let _ = Snapshot::parse(&bytes);
        let mut real = python_pickle();
        let n = real.len();
        real[flip % n] ^= 0x5a;
        real.truncate(cut.min(n));
        if let Ok(s) = Snapshot::parse(&real) {
            let _ = s.program(1.0);
        }
    }
}

/// `pickletools.optimize(pickle.dumps(d, protocol=2))` of a trace whose third and fourth
/// events are one dict (`f = {...}; [.., f, f, ..]`): the fourth is `BINGET 4`, a memo
/// reference, and the keys are memo references too.
const SHARED_EVENT_HEX: [&str; 6] = [
    "80027d580d0000006465766963655f7472616365735d5d287d285806000000616374696f6e7100580d000000",
    "7365676d656e745f616c6c6f6358040000006164647271018a0600000000007f580400000073697a6571024a",
    "00000004580700000074696d655f757371034b00757d2868005805000000616c6c6f6368018a060000000000",
    "7f68024d001068034b01757d7104286800580e000000667265655f72657175657374656468018a0600000000",
    "007f68024d001068034b027568047d286800580c0000007365676d656e745f6672656568018a060000000000",
    "7f68024a0000000468034b03756561732e",
];

#[test]
fn an_event_dict_the_pickle_shares_is_read_at_each_reference() {
    let hex: String = SHARED_EVENT_HEX.concat();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let snapshot = Snapshot::parse(&bytes).unwrap();
    let actions: Vec<Action> = snapshot.trace.iter().map(|e| e.action).collect();
    assert_eq!(
        actions,
        [
            Action::SegmentAlloc,
            Action::Alloc,
            Action::FreeRequested,
            Action::FreeRequested,
            Action::SegmentFree
        ]
    );
    assert_eq!(snapshot.trace[2], snapshot.trace[3]);
    assert_eq!(snapshot.trace[3].time_us, Some(2));
    snapshot.program(1.0).unwrap().validate().unwrap();
}

#[test]
fn a_huge_recorded_interval_reads_a_bounded_number_of_bytes() {
    // Two segments, each with a live block, and an interval of 10^15 us: the bytes the
    // kernel reads are capped, so that their sum cannot overflow.
    let mut b = SnapshotBuilder::new();
    let blocks: Vec<(u64, u64)> = (0..2)
        .map(|_| {
            let seg = b.segment(64 * MIB);
            (seg, b.alloc(seg, 0, 64 * MIB))
        })
        .collect();
    b.wait_us(1_000_000_000_000_000);
    b.free(blocks[0].0, blocks[0].1);
    let program = Snapshot::parse(&b.pickle()).unwrap().program(1e9).unwrap();
    let total: u64 = reads(&program).iter().sum();
    assert!(total <= MAX_KERNEL_BYTES + 2, "{total}");
    assert!(total >= MAX_KERNEL_BYTES - 2, "{total}");
}
