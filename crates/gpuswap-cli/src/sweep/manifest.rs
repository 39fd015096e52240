//! shard.toml: what a shard of a sweep records beside its results.csv, so that `gpuswap
//! merge` can check that the shards it is given make one whole sweep and rebuild that
//! sweep's plan without the scenario file.

use std::path::Path;

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
}

/// A short fingerprint of a sweep's plan: FNV-1a (64 bits) over its inputs. Not
/// cryptographic; it tells shards of different sweeps apart, the same on every machine
/// (std's hashers may change between Rust releases).
pub fn fingerprint(inputs: &PlanInputs) -> String {
    let text = format!(
        "{}\0{}\0{}\0{}\0{}",
        inputs.text,
        inputs.vary.join("\0"),
        inputs.runs,
        inputs.limits.max_events,
        inputs.limits.max_sim_ns
    );
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
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
            let killed = if dir.join("results.csv.partial").exists() {
                " (results.csv.partial is there: the shard did not finish; run it again with --force)"
            } else {
                ""
            };
            return Err(bad(format!(
                "missing; expected the folder of a finished `gpuswap sweep --shard I/N`{killed}"
            )));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(text: &str) -> PlanInputs<'_> {
        PlanInputs {
            text,
            vary: &[],
            runs: 2,
            limits: RunLimits::default(),
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
    }
}
