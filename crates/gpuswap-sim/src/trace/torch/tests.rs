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
