//! shard.toml: what a shard of a sweep records beside its results.csv, so that `gpuswap
//! merge` can check that the shards it is given make one whole sweep and rebuild that
//! sweep's plan without the scenario file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::SweepError;
use super::shard::Shard;
use gpuswap_sim::engine::RunLimits;

/// The manifest's file name in a shard's folder.
pub const FILE: &str = "shard.toml";

/// What a finished shard wrote: written last, so a folder with it holds a whole shard.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The shard, `I/N`.
    pub shard: Shard,
    /// The plan's fingerprint (see [`fingerprint`]): shards of one sweep share it.
    pub plan: String,
    /// Grid points of the whole sweep.
    pub total_points: usize,
    /// Runs (seeds) per grid point.
    pub runs_per_point: u32,
    /// The grid points this shard ran, ascending.
    pub points: Vec<usize>,
    /// The scenario's path as given to `sweep`: names it in errors and resolves the
    /// files it names (priorities), as in the sweep.
    pub scenario: String,
    /// The `--vary` flags.
    pub vary: Vec<String>,
    /// `--max-events`.
    pub max_events: u64,
    /// `--max-sim-time`, in ns.
    pub max_sim_ns: u64,
    /// `--max-page-touches` (absent from shards written before the flag: its default).
    #[serde(default = "default_page_touches")]
    pub max_page_touches: u64,
    /// The scenario file's text, `[sweep]` table included.
    pub text: String,
}

/// Everything that decides a sweep's rows, besides the program: a shard that differs in
/// any of them ran another sweep.
pub struct PlanInputs<'a> {
    /// The scenario file's text.
    pub text: &'a str,
    /// The `--vary` flags.
    pub vary: &'a [String],
    /// Runs per point, as the plan settled it.
    pub runs: u32,
    /// The bounds of every run.
    pub limits: RunLimits,
    /// The files the scenario reads (traces, fault logs, priorities): their contents
    /// decide the rows as much as the text does.
    pub files: &'a [PathBuf],
}

/// FNV-1a (64 bits): not cryptographic, but the same on every machine (std's hashers
/// may change between Rust releases).
fn fnv1a(bytes: &[u8], start: u64) -> u64 {
    bytes.iter().fold(start, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn default_page_touches() -> u64 {
    RunLimits::default().max_page_touches
}

/// A short fingerprint of a sweep's plan: a hash of its inputs, the contents of the
/// files its scenario reads included (a file that cannot be read counts as such). It
/// tells shards of different sweeps apart.
pub fn fingerprint(inputs: &PlanInputs) -> String {
    let text = format!(
        "{}\0{}\0{}\0{}\0{}",
        inputs.text,
        inputs.vary.join("\0"),
        inputs.runs,
        inputs.limits.max_events,
        inputs.limits.max_sim_ns
    );
    let mut hash = fnv1a(text.as_bytes(), 0xcbf2_9ce4_8422_2325);
    // Counted only where it is not the default, so that plans from before the flag keep
    // their fingerprints.
    if inputs.limits.max_page_touches != default_page_touches() {
        hash = fnv1a(
            format!("\0{}", inputs.limits.max_page_touches).as_bytes(),
            hash,
        );
    }
    for file in inputs.files {
        hash = fnv1a(format!("\0{}\0", file.display()).as_bytes(), hash);
        hash = match std::fs::read(file) {
            Ok(bytes) => fnv1a(&bytes, hash),
            Err(_) => fnv1a(b"\0unreadable", hash),
        };
    }
    format!("{hash:016x}")
}

impl Manifest {
    /// The manifest of `shard`, which ran `points` of a plan of `total_points`.
    pub fn new(
        shard: Shard,
        scenario: &Path,
        inputs: &PlanInputs,
        total_points: usize,
        points: Vec<usize>,
    ) -> Self {
        Self {
            shard,
            plan: fingerprint(inputs),
            total_points,
            runs_per_point: inputs.runs,
            points,
            scenario: scenario.to_string_lossy().into_owned(),
            vary: inputs.vary.to_vec(),
            max_events: inputs.limits.max_events,
            max_sim_ns: inputs.limits.max_sim_ns,
            max_page_touches: inputs.limits.max_page_touches,
            text: inputs.text.to_owned(),
        }
    }

    /// Writes `dir/shard.toml` atomically (a temporary file renamed), as the last file
    /// of a shard.
    pub fn write(&self, dir: &Path) -> Result<(), SweepError> {
        let text = format!(
            "# Written by `gpuswap sweep --shard {}`; `gpuswap merge` reads it.\n{}",
            self.shard,
            toml::to_string(self).expect("manifests serialize")
        );
        let path = dir.join(FILE);
        crate::text::write_atomically(&path, &text)
            .map_err(|e| SweepError::Output(format!("{}: {e}", path.display())))
    }

    /// Reads `dir/shard.toml`; errors name the file and what was expected.
    pub fn read(dir: &Path) -> Result<Self, SweepError> {
        let path = dir.join(FILE);
        let bad = |m: String| SweepError::BadInput(format!("{}: {m}", path.display()));
        if !path.exists() {
            check_finished(dir)
                .map_err(|m| SweepError::BadInput(format!("{}: {m}", dir.display())))?;
            return Err(bad(
                "missing; expected the folder of a finished `gpuswap sweep --shard I/N`".into(),
            ));
        }
        let text = crate::text::read_text(&path).map_err(&bad)?;
        toml::from_str(&text).map_err(|e| {
            bad(format!(
                "{}; expected the manifest `gpuswap sweep --shard` writes",
                e.message()
            ))
        })
    }
}

/// The file that marks a folder's sweep (or shard) as unfinished: the manifest, written
/// before the first point, then a line per finished point. Its rows so far are in
/// results.csv.partial (and patterns.csv.partial); the sweep removes it when it ends.
pub const INCOMPLETE: &str = "incomplete.toml";

/// What a finished point's line in [`INCOMPLETE`] starts with: then the point and the
/// bytes results.csv.partial and patterns.csv.partial held once its rows were written.
const DONE: &str = "# done:";

impl Manifest {
    /// The command that finishes this sweep in `dir`: the flags it ran with, and
    /// `--resume`.
    pub fn resume_command(&self, dir: &Path) -> String {
        let quote = |t: &str| {
            if t.chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-=+[]".contains(c))
            {
                t.to_owned()
            } else {
                format!("'{}'", t.replace('\'', r"'\''"))
            }
        };
        let mut command = format!("gpuswap sweep {}", quote(&self.scenario));
        for v in &self.vary {
            command += &format!(" --vary {}", quote(v));
        }
        command += &format!(" --runs {}", self.runs_per_point);
        if self.shard != super::shard::Shard::WHOLE {
            command += &format!(" --shard {}", self.shard);
        }
        let defaults = RunLimits::default();
        if self.max_events != defaults.max_events {
            command += &format!(" --max-events {}", self.max_events);
        }
        if self.max_sim_ns != defaults.max_sim_ns {
            command += &format!(" --max-sim-time {}ns", self.max_sim_ns);
        }
        if self.max_page_touches != defaults.max_page_touches {
            command += &format!(" --max-page-touches {}", self.max_page_touches);
        }
        format!("{command} --out {} --resume", quote(&dir.to_string_lossy()))
    }

    /// Writes `dir/incomplete.toml` before the sweep's first point.
    pub fn write_incomplete(&self, dir: &Path) -> Result<(), SweepError> {
        let text = format!(
            "# A sweep that has not finished: the rows of its finished points are in results.csv.partial.\n\
             # Finish it with: {}\n{}",
            self.resume_command(dir),
            toml::to_string(self).expect("manifests serialize")
        );
        let path = dir.join(INCOMPLETE);
        crate::text::write_atomically(&path, &text)
            .map_err(|e| SweepError::Output(format!("{}: {e}", path.display())))
    }
}

/// Notes in `dir/incomplete.toml` that `point` is finished, its rows written: the
/// tables then held `bytes` (results.csv.partial's, patterns.csv.partial's).
pub fn note_done(dir: &Path, point: usize, bytes: [u64; 2]) -> Result<(), SweepError> {
    use std::io::Write;
    let path = dir.join(INCOMPLETE);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{DONE} {point} {} {}", bytes[0], bytes[1]))
        .map_err(|e| SweepError::Output(format!("{}: {e}", path.display())))
}

/// An unfinished sweep: its manifest and how far it got.
pub struct Incomplete {
    /// The plan, the shard and the flags it ran with.
    pub manifest: Manifest,
    /// How many of its points finished (the first of `manifest.points`).
    pub done: usize,
    /// The bytes results.csv.partial and patterns.csv.partial held after the last.
    pub bytes: [u64; 2],
}

/// Reads `dir/incomplete.toml`: None when there is none (the folder's sweep finished,
/// or never started there).
pub fn read_incomplete(dir: &Path) -> Result<Option<Incomplete>, SweepError> {
    let path = dir.join(INCOMPLETE);
    if !path.exists() {
        return Ok(None);
    }
    let bad = |m: String| SweepError::BadInput(format!("{}: {m}", path.display()));
    let text = crate::text::read_text(&path).map_err(&bad)?;
    let manifest: Manifest = toml::from_str(&text).map_err(|e| {
        bad(format!(
            "{}; expected the manifest `gpuswap sweep` writes",
            e.message()
        ))
    })?;
    let (mut done, mut bytes) = (0, [0, 0]);
    // A line cut short by a kill has no newline: its point counts as not finished.
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let Some(fields) = line.strip_prefix(DONE) else {
            continue;
        };
        let numbers: Vec<u64> = fields
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| bad(format!("{line:?}: expected {DONE} POINT BYTES BYTES")))?;
        let [point, results, patterns] = numbers[..] else {
            return Err(bad(format!("{line:?}: expected {DONE} POINT BYTES BYTES")));
        };
        if manifest.points.get(done).is_none_or(|p| *p as u64 != point) {
            return Err(bad(format!(
                "{line:?}: expected the points in the order the manifest lists them"
            )));
        }
        done += 1;
        bytes = [results, patterns];
    }
    Ok(Some(Incomplete {
        manifest,
        done,
        bytes,
    }))
}

/// Refuses a folder whose sweep has not finished (killed, or stopped by an error): its
/// files would look like a whole sweep's. The error (to follow the folder's name) says
/// how to finish it. `gpuswap report` and `gpuswap merge` ask this first.
pub fn check_finished(dir: &Path) -> Result<(), String> {
    match read_incomplete(dir) {
        Ok(None) if dir.join("results.csv").exists() || !dir.join("results.csv.partial").exists() => Ok(()),
        Ok(None) => Err(
            "the sweep did not finish (results.csv.partial is there, results.csv is not); run it again with --force".into(),
        ),
        Ok(Some(i)) => Err(format!(
            "the sweep did not finish ({} of its {} points are done); finish it with: {}",
            i.done,
            i.manifest.points.len(),
            i.manifest.resume_command(dir)
        )),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(text: &str) -> PlanInputs<'_> {
        PlanInputs {
            text,
            vary: &[],
            runs: 2,
            limits: RunLimits::default(),
            files: &[],
        }
    }

    #[test]
    fn a_manifest_reads_back_as_written() {
        let dir = std::env::temp_dir().join(format!("gpuswap-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = "seed = 1\n[[tenant]]\napp = \"nn\" # \"quoted\"\n";
        let shard: Shard = "2/3".parse().unwrap();
        let written = Manifest::new(shard, Path::new("a.toml"), &inputs(text), 7, vec![1, 4]);
        written.write(&dir).unwrap();
        let read = Manifest::read(&dir).unwrap();
        assert_eq!(read.text, text);
        assert_eq!((read.shard, read.points), (shard, vec![1, 4]));
        assert_eq!(read.plan, written.plan);
        assert!(!dir.join("shard.toml.partial").exists());
        std::fs::write(dir.join(FILE), "shard = 3\n").unwrap();
        let SweepError::BadInput(e) = Manifest::read(&dir).unwrap_err() else {
            panic!("bad input expected")
        };
        assert!(e.contains("shard.toml") && e.contains("expected"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_fingerprint_changes_with_every_input() {
        let base = fingerprint(&inputs("seed = 1\n"));
        assert_eq!(base, fingerprint(&inputs("seed = 1\n")));
        assert_ne!(base, fingerprint(&inputs("seed = 2\n")));
        let vary = ["seed=1,2".to_owned()];
        let mut other = inputs("seed = 1\n");
        other.vary = &vary;
        assert_ne!(base, fingerprint(&other));
        other = inputs("seed = 1\n");
        other.runs = 3;
        assert_ne!(base, fingerprint(&other));
        other = inputs("seed = 1\n");
        other.limits.max_events = 1;
        assert_ne!(base, fingerprint(&other));
        other = inputs("seed = 1\n");
        other.limits.max_page_touches = 1;
        assert_ne!(base, fingerprint(&other));
    }

    #[test]
    fn the_fingerprint_covers_the_contents_of_the_files_read() {
        let dir = std::env::temp_dir().join(format!("gpuswap-fingerprint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = [dir.join("a.pickle")];
        let mut with_file = inputs("seed = 1\n");
        with_file.files = &files;
        let missing = fingerprint(&with_file);
        std::fs::write(&files[0], "one").unwrap();
        let one = fingerprint(&with_file);
        assert_eq!(one, fingerprint(&with_file));
        std::fs::write(&files[0], "two").unwrap();
        let two = fingerprint(&with_file);
        assert!(missing != one && one != two && two != missing);
        assert_ne!(one, fingerprint(&inputs("seed = 1\n")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
