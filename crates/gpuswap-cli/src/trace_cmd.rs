//! `gpuswap trace info FILE`: what a PyTorch memory snapshot or a unified-memory fault
//! log holds, before a run replays it; and the warning a run gives for a replay on
//! invented timing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gpuswap_sim::engine::TenantSpec;
use gpuswap_sim::trace::torch::{Action, Snapshot};
use gpuswap_sim::trace::uvm_log::FaultLog;
use gpuswap_sim::units::{format_bytes, format_ns};
use serde::Serialize;

/// `gpuswap trace`.
#[derive(clap::Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(clap::Subcommand)]
enum TraceCommand {
    /// Summarize a PyTorch memory snapshot (.pickle) or a uvm-eval fault log: its kind,
    /// device, segments, peak memory, events and time span, and how a replay is timed.
    #[command(after_help = "Examples:\n  \
        gpuswap trace info scenarios/traces/train.pickle\n  \
        gpuswap trace info scenarios/traces/abc-faults.log --json")]
    Info {
        /// The snapshot (a pickle) or the fault log (text).
        file: PathBuf,
        /// Print the summary as JSON, for scripts.
        #[arg(long)]
        json: bool,
    },
}

/// What a trace file holds (`--json` prints it as is).
#[derive(Debug, Serialize)]
pub struct Summary {
    /// The file as given.
    pub file: String,
    /// `pytorch-snapshot` or `uvm-fault-log`.
    pub kind: &'static str,
    /// The device a replay uses (a snapshot's index in `device_traces`); null for a
    /// fault log, which does not record it.
    pub device: Option<usize>,
    /// A snapshot's segments of that device at the dump; null for a fault log.
    pub segments: Option<usize>,
    /// Their bytes; null for a fault log.
    pub segment_bytes: Option<u64>,
    /// The most memory the replay holds at once: a snapshot's segments at its peak, a
    /// fault log's managed memory (the 2 MiB VA blocks its faults lie in).
    pub peak_bytes: u64,
    /// A snapshot's trace events, or a fault log's faults (as listed, once per uTLB).
    pub events: u64,
    /// A snapshot's events by action (`segment_map` counts as `segment_alloc`,
    /// `segment_unmap` as `segment_free`); null for a fault log.
    pub actions: Option<BTreeMap<&'static str, u64>>,
    /// A fault log's batches; null for a snapshot.
    pub batches: Option<u64>,
    /// From the first to the last timestamp (`time_us`, or the GPU's timer); null
    /// where there is none.
    pub time_span_ns: Option<u64>,
    /// How a replay is timed: `recorded`, `invented: ...` or `simulated: ...`.
    pub timing: String,
}

/// Runs `gpuswap trace`; the text to print, or an error naming the file.
pub fn run(args: &TraceArgs) -> Result<String, String> {
    let TraceCommand::Info { file, json } = &args.command;
    let summary = summarize(file)?;
    Ok(if *json {
        serde_json::to_string_pretty(&summary).expect("summaries serialize") + "\n"
    } else {
        text(&summary)
    })
}

/// Reads `file` as a snapshot (a pickle of protocol 2 or later begins with byte 0x80, as
/// PyTorch writes them) or else as a fault log.
pub fn summarize(file: &Path) -> Result<Summary, String> {
    let bytes =
        std::fs::read(file).map_err(|e| format!("{}: cannot read it: {e}", file.display()))?;
    let name = file.display().to_string();
    if bytes.first() == Some(&0x80) {
        let fail = |e: &dyn std::fmt::Display| {
            format!("{name}: not a PyTorch memory snapshot gpuswap can replay: {e}")
        };
        let snapshot = Snapshot::parse(&bytes).map_err(|e| fail(&e))?;
        let peak_bytes = snapshot.peak_reserved_bytes().map_err(|e| fail(&e))?;
        Ok(snapshot_summary(name, &snapshot, peak_bytes))
    } else {
        let log = FaultLog::parse(&bytes).map_err(|e| {
            format!(
                "{name}: neither a PyTorch memory snapshot (a pickle) nor a uvm-eval fault log: {e}"
            )
        })?;
        Ok(fault_log_summary(name, &log))
    }
}

fn snapshot_summary(file: String, snapshot: &Snapshot, peak_bytes: u64) -> Summary {
    let mut actions = BTreeMap::new();
    for e in &snapshot.trace {
        let name = match e.action {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::Other => "other",
        };
        *actions.entry(name).or_insert(0) += 1;
    }
    Summary {
        file,
        kind: "pytorch-snapshot",
        device: Some(snapshot.device),
        segments: Some(snapshot.segments.len()),
        segment_bytes: Some(snapshot.segments.iter().map(|s| s.total_size).sum()),
        peak_bytes,
        events: snapshot.trace.len() as u64,
        actions: Some(actions),
        batches: None,
        time_span_ns: snapshot
            .time_span_us()
            .map(|(first, last)| (last - first).saturating_mul(1000)),
        timing: snapshot.timing(),
    }
}

fn fault_log_summary(file: String, log: &FaultLog) -> Summary {
    let faults: u64 = log.batches.iter().map(|b| b.faults.len() as u64).sum();
    let (first, last) = log.time_span_ns();
    Summary {
        file,
        kind: "uvm-fault-log",
        device: None,
        segments: None,
        segment_bytes: None,
        peak_bytes: log.program().peak_allocated_bytes(),
        events: faults,
        actions: None,
        batches: Some(log.batches.len() as u64),
        // A log whose timestamps are all zero recorded none.
        time_span_ns: (last > 0).then_some(last - first),
        timing: FaultLog::TIMING.into(),
    }
}

/// The summary as aligned lines.
fn text(s: &Summary) -> String {
    let mut rows = vec![("file", s.file.clone())];
    match s.kind {
        "pytorch-snapshot" => {
            rows.push(("kind", "PyTorch memory snapshot".into()));
            rows.push(("device", format!("{}", s.device.unwrap_or_default())));
            rows.push((
                "segments",
                format!(
                    "{} at the dump ({})",
                    s.segments.unwrap_or_default(),
                    format_bytes(s.segment_bytes.unwrap_or_default())
                ),
            ));
            rows.push((
                "peak",
                format!("{} held from the driver", format_bytes(s.peak_bytes)),
            ));
            let actions: Vec<String> = s
                .actions
                .iter()
                .flatten()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            rows.push(("events", format!("{} ({})", s.events, actions.join(", "))));
        }
        _ => {
            rows.push(("kind", "unified-memory fault log (uvm-eval)".into()));
            rows.push(("device", "not recorded".into()));
            rows.push((
                "peak",
                format!(
                    "{} of managed memory (the 2 MiB blocks faulted in)",
                    format_bytes(s.peak_bytes)
                ),
            ));
            rows.push((
                "events",
                format!(
                    "{} faults in {} batches",
                    s.events,
                    s.batches.unwrap_or_default()
                ),
            ));
        }
    }
    rows.push((
        "time span",
        s.time_span_ns.map_or("no timestamps".into(), format_ns),
    ));
    rows.push(("timing", s.timing.clone()));
    rows.iter().map(|(k, v)| format!("{k:<10} {v}\n")).collect()
}

/// The warnings for the tenants of a scenario that replay on invented timing: their
/// times and slowdowns are not those of the recorded program.
pub fn invented_timing_warnings(file: &Path, tenants: &[TenantSpec]) -> Vec<String> {
    tenants
        .iter()
        .filter_map(|t| {
            let why = t.timing.as_ref()?.strip_prefix("invented: ")?;
            Some(format!(
                "warning: {}: tenant {} replays on invented timing: {why} (`gpuswap trace info` shows what the file holds)",
                file.display(),
                t.name
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel)
    }

    #[test]
    fn a_shipped_snapshot_and_fault_log_are_summarized() {
        let s = summarize(&repo("scenarios/traces/train.pickle")).unwrap();
        assert_eq!(s.kind, "pytorch-snapshot");
        // The training job's peak (its scenario's comment says 6.5 GiB).
        assert_eq!(s.peak_bytes, 6656 << 20);
        assert_eq!(s.timing, "recorded");
        assert!(s.time_span_ns.unwrap() > 0);
        let actions = s.actions.unwrap();
        assert_eq!(actions.values().sum::<u64>(), s.events);
        assert_eq!(actions["segment_alloc"], 3);
        let log = summarize(&repo("scenarios/traces/abc-faults.log")).unwrap();
        assert_eq!(log.kind, "uvm-fault-log");
        assert_eq!(log.batches, Some(3));
        assert_eq!(log.events, 96);
        // Three 2 MiB managed arrays.
        assert_eq!(log.peak_bytes, 6 << 20);
        assert!(log.timing.starts_with("simulated: "));
    }

    #[test]
    fn what_is_neither_is_refused_with_the_file_named() {
        let e = summarize(&repo("scenarios/traces/README.md")).unwrap_err();
        assert!(
            e.starts_with(&repo("scenarios/traces/README.md").display().to_string()),
            "{e}"
        );
        assert!(e.contains("neither a PyTorch memory snapshot"), "{e}");
        let e = summarize(Path::new("/nonexistent/x.pickle")).unwrap_err();
        assert!(
            e.starts_with("/nonexistent/x.pickle: cannot read it"),
            "{e}"
        );
    }
}
