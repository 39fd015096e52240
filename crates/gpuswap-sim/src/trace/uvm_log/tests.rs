use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::program::{Distribution, Op, Program};

/// A real log from uvm-eval (a Titan V running its `abc` benchmark; attribution in
/// `scenarios/traces/README.md`), as its `syslogger` wrote the kernel log.
const ABC: &[u8] = include_bytes!("../../../../../scenarios/traces/abc-faults.log");

/// A fault record on page `page` (4 KiB) with access type `access`.
fn f(page: u64, access: u8) -> String {
    format!(
        "f,{:x},1606348764141810176,0,{access},2,1,0,0,0,127,1,0,1,63",
        page * 4096
    )
}

/// The error reading `text`, as its message.
fn error(text: &str) -> String {
    FaultLog::parse(text.as_bytes()).unwrap_err().to_string()
}

/// The pages each launch of `program` touches, in order, with whether it writes them:
/// buffer labels are their start addresses.
fn touched(program: &Program) -> Vec<BTreeMap<u64, bool>> {
    let base = |slot: usize| {
        let label = &program.buffers[slot].label;
        u64::from_str_radix(label.trim_start_matches("0x"), 16).unwrap() / 4096
    };
    program
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Launch(k) => Some(k),
            _ => None,
        })
        .map(|k| {
            let mut pages = BTreeMap::new();
            for a in &k.accesses {
                let Distribution::Ranges(ranges) = &a.distribution else {
                    panic!("page ranges")
                };
                let touches: u64 = ranges.iter().map(|r| r.bytes / 4096).sum();
                // One touch per page: the access moves one page of bytes per page.
                assert_eq!((a.read_bytes + a.write_bytes) / 4096, touches);
                for r in ranges {
                    for p in 0..r.bytes / 4096 {
                        let page = base(a.slot) + r.offset_bytes / 4096 + p;
                        assert!(pages.insert(page, a.write_bytes > 0).is_none());
                    }
                }
            }
            pages
        })
        .collect()
}

#[test]
fn the_abc_log_has_three_batches() {
    let log = FaultLog::parse(ABC).unwrap();
    assert_eq!(log.faults_per_batch(), [56, 8, 32]);
    let first = log.batches[0].faults[0];
    assert_eq!(
        first,
        Fault {
            address: 0x7fb1_4400_0000,
            timestamp_ns: 1_606_348_764_141_810_176,
            access: AccessType::Read,
        }
    );
    // `a` and `b` are read, `c` written.
    let writes: Vec<bool> = log.batches[2]
        .faults
        .iter()
        .map(|f| f.access.writes())
        .collect();
    assert!(writes.iter().all(|w| *w));
    assert!(
        log.batches[..2]
            .iter()
            .flat_map(|b| &b.faults)
            .all(|f| f.access == AccessType::Read)
    );
}

#[test]
fn the_csv_form_reads_as_the_kernel_log() {
    // What uvm-eval's log2csv.sh makes of it: range lines, then the records alone.
    let text = std::str::from_utf8(ABC).unwrap();
    let mut csv = String::from("0x7fb144000000, 2097152\n0x7fb144200000, 2097152\n");
    for line in text.lines() {
        let message = line.split_once(';').unwrap().1;
        if message.chars().nth(1) == Some(',') {
            csv += message;
            csv += "\n";
        }
    }
    assert_eq!(
        FaultLog::parse(csv.as_bytes()).unwrap(),
        FaultLog::parse(ABC).unwrap()
    );
}

#[test]
fn the_replay_touches_each_batchs_pages_in_order() {
    let log = FaultLog::parse(ABC).unwrap();
    let program = log.program();
    program.validate().unwrap();
    // Three 2 MiB blocks in a row: one buffer.
    assert_eq!(program.buffers.len(), 1);
    assert_eq!(program.buffers[0].label, "0x7fb144000000");
    assert_eq!(program.buffers[0].bytes, 6 << 20);
    let expected: Vec<BTreeMap<u64, bool>> = log.batches.iter().map(Batch::pages).collect();
    assert_eq!(touched(&program), expected);
}

#[test]
fn a_page_faulted_twice_is_one_fault_and_written_if_either_wrote() {
    // Page 0x10 from two uTLBs, read then written; a far block of its own; an empty
    // batch launches nothing.
    let text = [
        "s,".into(),
        f(0x10, 1),
        f(0x10, 3),
        f(0x11, 0),
        f(0x5_0000, 1),
        "b,100,0".into(),
        "s,".into(),
        "b,".into(),
        "s,".into(),
        f(0x12, 2),
        "b,".into(),
    ]
    .join("\n");
    let log = FaultLog::parse(text.as_bytes()).unwrap();
    assert_eq!(log.faults_per_batch(), [3, 0, 1]);
    let program = log.program();
    program.validate().unwrap();
    assert_eq!(program.buffers.len(), 2);
    let pages = touched(&program);
    assert_eq!(
        pages,
        [
            BTreeMap::from([(0x10, true), (0x11, false), (0x5_0000, false)]),
            BTreeMap::from([(0x12, true)]),
        ]
    );
    // Consecutive pages are one range.
    let Op::Launch(k) = &program.ops[2] else {
        panic!("a launch")
    };
    let Distribution::Ranges(ranges) = &k.accesses[0].distribution else {
        panic!("ranges")
    };
    assert_eq!((ranges.len(), ranges[0].bytes), (1, 4096));
}

#[test]
fn bad_logs_name_the_line_and_what_was_expected() {
    let fault = f(1, 1);
    let cases: [(String, &str); 13] = [
        (String::new(), "no fault batch in the log"),
        ("\n\n".into(), "no fault batch"),
        (
            "s,\nf,7fb144000000,1606348764141810176,0,1\nb,".into(),
            "line 2: `f` record with 4 fields; expected 14",
        ),
        (
            format!("s,\n{}\nb,", fault.replacen("f,1000", "f,10zz", 1)),
            "line 2: address is \"10zz\"; expected a hexadecimal address",
        ),
        (
            format!("s,\n{}\nb,", fault.replacen(",0,1,2,", ",0,7,2,", 1)),
            "line 2: access_type is \"7\"; expected 0 (prefetch), 1 (read)",
        ),
        (
            format!("s,\n{}\nb,", fault.replacen(",127,", ",x,", 1)),
            "line 2: mmu_engine_id is \"x\"; expected a whole number",
        ),
        (
            "s,\nq,1\nb,".into(),
            "line 2: unknown record type \"q\"; expected s, f, b, p or e",
        ),
        (
            "NVRM: loaded\n".into(),
            "line 1: unknown record type \"NVRM: loaded\"",
        ),
        (
            format!("{fault}\n"),
            "line 1: `f,` outside a batch; expected `s,`",
        ),
        ("b,\n".into(), "line 1: `b,` without a batch"),
        (
            "s,\ns,\nb,".into(),
            "line 2: `s,` inside the batch started at line 1",
        ),
        (
            format!("s,\n{fault}\n"),
            "line 1: the batch started here never ends; expected its `b,` record (is the log truncated?)",
        ),
        (
            "s,\nb,12\n".into(),
            "line 2: `b` record with 1 fields; expected 2",
        ),
    ];
    for (text, expected) in cases {
        let e = error(&text);
        assert!(e.contains(expected), "{text:?}: {e}");
    }
    let e = FaultLog::parse(b"s,\n\xff\nb,").unwrap_err().to_string();
    assert_eq!(e, "line 2: not UTF-8 text; expected a text log");
    // In the kernel log's form, other kernel messages are skipped, but a record of an
    // unknown type is still an error.
    let kmsg = |m: &str| format!("6,1,2,-;{m}\n");
    let ok = [kmsg("s,"), kmsg("NVRM: loaded"), kmsg(&fault), kmsg("b,")].concat();
    assert_eq!(
        FaultLog::parse(ok.as_bytes()).unwrap().faults_per_batch(),
        [1]
    );
    let e = error(&[kmsg("s,"), kmsg("z,1"), kmsg("b,")].concat());
    assert!(e.contains("line 2: unknown record type \"z\""), "{e}");
}

/// A well-formed log: batches of faults `(page, access type)`, with prefetch records
/// between them.
fn arb_log() -> impl Strategy<Value = String> {
    let batch = proptest::collection::vec((0u64..1 << 20, 0u8..5), 0..20);
    proptest::collection::vec(batch, 1..8).prop_map(|batches| {
        let mut text = String::new();
        for faults in batches {
            text += "s,\n";
            for (page, access) in faults {
                text += &f(page, access);
                text += "\n";
            }
            text += "p,7fb144000000\nb,120,0\n";
        }
        text
    })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = FaultLog::parse(&bytes);
    }

    #[test]
    fn a_replay_touches_the_logged_pages(text in arb_log()) {
        let log = FaultLog::parse(text.as_bytes()).unwrap();
        let program = log.program();
        prop_assert_eq!(program.validate(), Ok(()));
        let expected: Vec<BTreeMap<u64, bool>> = log
            .batches
            .iter()
            .map(Batch::pages)
            .filter(|pages| !pages.is_empty())
            .collect();
        prop_assert_eq!(touched(&program), expected);
    }
}

#[test]
fn kernel_log_continuation_lines_are_skipped() {
    let text = std::str::from_utf8(ABC).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    // A device message and its continuation, as /dev/kmsg writes them.
    lines.insert(1, "6,1234,567890,-;pci 0000:00:01.0: enabled");
    lines.insert(2, " SUBSYSTEM=pci");
    lines.insert(3, " DEVICE=+pci:0000:00:01.0");
    let log = FaultLog::parse(lines.join("\n").as_bytes()).unwrap();
    assert_eq!(log.faults_per_batch(), [56, 8, 32]);
}
