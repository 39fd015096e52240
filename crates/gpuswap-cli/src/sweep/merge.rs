//! `gpuswap merge`: the folders of a sharded sweep (`gpuswap sweep --shard I/N`) made
//! into the outputs of the whole sweep: the same bytes `gpuswap sweep` writes in one go,
//! since the records go, point by point in order, through the sweep's own output stage.

use std::collections::BTreeMap;
use std::fs::File;
use std::iter::Peekable;
use std::path::{Path, PathBuf};

use super::error::SweepError;
use super::folder::{check_html, prepare_out, write_html, write_scenario};
use super::manifest::{self, Manifest};
use super::output::{Outputs, patterns_header, results_header};
use super::plan::Plan;
use super::records::{PointRecords, error_column};
use super::shard::Shard;
use super::summary::{check_failures, report};

/// Settings of a merge from the command line.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    gpuswap merge part1 part2 part3 --out results/big\n  \
    gpuswap merge part* --out results/big --png   # the shards of `gpuswap sweep big.toml --shard I/N`")]
pub struct MergeArgs {
    /// The shards' folders, each written by `gpuswap sweep --shard I/N`.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Output folder.
    #[arg(long)]
    pub out: PathBuf,
    /// Also write PNG plots.
    #[arg(long)]
    pub png: bool,
    /// Write into an output folder that holds an earlier sweep's files, replacing them.
    #[arg(long)]
    pub force: bool,
    /// Also write the sweep as one self-contained web page (as `gpuswap report`).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// Checks that the shards make one whole sweep, each point once, and writes its
/// results.csv, summary.csv, normalized.csv and plots into `--out`.
pub fn merge(args: &MergeArgs) -> Result<(), SweepError> {
    let manifests: Vec<Manifest> = args
        .dirs
        .iter()
        .map(|d| Manifest::read(d))
        .collect::<Result<_, _>>()?;
    let first = &manifests[0];
    // The plan first: it checks the first manifest's size, which sizes what follows.
    let plan = rebuild_plan(&args.dirs[0], first)?;
    for (dir, m) in args.dirs.iter().zip(&manifests).skip(1) {
        if m.plan != first.plan || m.total_points != first.total_points {
            return Err(SweepError::BadInput(format!(
                "{}: plan {} differs from {}'s plan {}: the shards ran different sweeps (scenario text, --vary, --runs or limits); expected shards of one sweep",
                dir.join(manifest::FILE).display(),
                m.plan,
                args.dirs[0].display(),
                first.plan
            )));
        }
    }
    let owners = owners(&args.dirs, &manifests, &plan.axis_sizes())?;
    for dir in &args.dirs {
        if same_folder(dir, &args.out) {
            return Err(SweepError::BadInput(format!(
                "--out {}: that is the shard folder {}; expected another folder (the merge would replace what it reads)",
                args.out.display(),
                dir.display()
            )));
        }
    }
    let mut shards: Vec<ShardTables> = args
        .dirs
        .iter()
        .map(|d| ShardTables::open(d, &plan))
        .collect::<Result<_, _>>()?;
    check_html(args.html.as_deref(), args.force)?;
    prepare_out(&args.out, args.force)?;
    let mut outputs = Outputs::create(&args.out, &plan)?;
    let progress = super::execute::progress_bar(owners.len() as u64, "points", false);
    let merged = (|| {
        for (p, &owner) in owners.iter().enumerate() {
            let shard = &mut shards[owner];
            let records = shard.point(p, plan.runs as usize)?;
            outputs.point(&records).map_err(|e| match e {
                SweepError::BadInput(m) => {
                    SweepError::BadInput(format!("{}: {m}", shard.results.path.display()))
                }
                other => other,
            })?;
            progress.inc(1);
        }
        shards.into_iter().try_for_each(ShardTables::finish)
    })();
    progress.finish_and_clear();
    if let Err(e) = merged {
        // Nothing half-merged stays behind.
        for table in ["results.csv", "patterns.csv"] {
            let _ = std::fs::remove_file(crate::text::partial_path(&args.out.join(table)));
        }
        return Err(e);
    }
    let summary = outputs.finish()?;
    summary.write(&args.out, args.png)?;
    let m = &manifests[0];
    write_scenario(&args.out, &m.scenario, &m.vary, plan.runs, &m.text)?;
    write_html(&args.out, args.html.as_deref(), args.force)?;
    let what = format!("merged {} shards: ", args.dirs.len());
    report(&what, &plan, plan.points.len(), &summary, &args.out)?;
    // As the shards themselves did: failed runs make the merge's exit status 1.
    check_failures(&summary, &args.out, false)
}

/// Which shard (its index in `dirs`) holds each point of the plan; the error names the
/// missing points (by shard, when all the shards split the sweep in as many) and the
/// points held more than once with their folders.
fn owners(
    dirs: &[PathBuf],
    manifests: &[Manifest],
    sizes: &[usize],
) -> Result<Vec<usize>, SweepError> {
    let total = manifests[0].total_points;
    let mut holders: Vec<Vec<usize>> = vec![Vec::new(); total];
    for (i, m) in manifests.iter().enumerate() {
        for &p in &m.points {
            let Some(h) = holders.get_mut(p) else {
                return Err(SweepError::BadInput(format!(
                    "{}: point {p}: expected a point of the plan's {total} (0 to {})",
                    dirs[i].join(manifest::FILE).display(),
                    total.saturating_sub(1)
                )));
            };
            h.push(i);
        }
    }
    let mut problems = Vec::new();
    let missing: Vec<usize> = (0..total).filter(|p| holders[*p].is_empty()).collect();
    let counts: Vec<usize> = manifests.iter().map(|m| m.shard.count()).collect();
    if !missing.is_empty() && counts.iter().all(|n| *n == counts[0]) {
        let mut by_shard: BTreeMap<Shard, Vec<usize>> = BTreeMap::new();
        for &p in &missing {
            by_shard
                .entry(Shard::of(p, counts[0], sizes))
                .or_default()
                .push(p);
        }
        for (shard, points) in by_shard {
            problems.push(format!("shard {shard} is missing: {}", point_list(&points)));
        }
    } else if !missing.is_empty() {
        problems.push(format!("missing: {}", point_list(&missing)));
    }
    let mut repeated: BTreeMap<&[usize], Vec<usize>> = BTreeMap::new();
    for (p, h) in holders.iter().enumerate().filter(|(_, h)| h.len() > 1) {
        repeated.entry(h).or_default().push(p);
    }
    for (held_by, points) in repeated {
        let folders: Vec<String> = held_by
            .iter()
            .map(|i| dirs[*i].display().to_string())
            .collect();
        problems.push(format!(
            "{} more than once: in {}",
            point_list(&points),
            folders.join(", ")
        ));
    }
    if !problems.is_empty() {
        return Err(SweepError::BadInput(format!(
            "the shards do not hold each of the sweep's {total} points exactly once; expected each point in one of the folders:\n  {}",
            problems.join("\n  ")
        )));
    }
    Ok(holders.into_iter().map(|h| h[0]).collect())
}

/// Points for a message: `point 4`, or `points 1, 4` with the first ten and how many
/// in all.
fn point_list(points: &[usize]) -> String {
    let shown: Vec<String> = points.iter().take(10).map(usize::to_string).collect();
    match points.len() {
        1 => format!("point {}", shown[0]),
        n if n > 10 => format!("points {}, ... ({n} in all)", shown.join(", ")),
        _ => format!("points {}", shown.join(", ")),
    }
}

/// The plan the shards ran, from the scenario text and flags `dir`'s manifest recorded;
/// it must have as many points as where the shards ran.
fn rebuild_plan(dir: &Path, m: &Manifest) -> Result<Plan, SweepError> {
    let file = dir.join(manifest::FILE);
    let bad = |e: String| SweepError::BadInput(format!("{}: its scenario: {e}", file.display()));
    let plan = Plan::new(
        Path::new(&m.scenario),
        &m.text,
        &m.vary,
        Some(m.runs_per_point),
    )
    .map_err(|e| bad(e.to_string()))?;
    if plan.points.len() != m.total_points {
        return Err(bad(format!(
            "{} grid points here, {} where the shards ran; expected the gpuswap that ran them",
            plan.points.len(),
            m.total_points
        )));
    }
    Ok(plan)
}

/// Whether two paths name one existing folder.
fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// A shard's results.csv, and patterns.csv in a mode that pages, read a point at a time
/// (or an unfinished sweep's partial ones, for `--resume`).
pub(super) struct ShardTables {
    /// results.csv's column of a run's error: the figures follow it.
    error_column: usize,
    header: Vec<String>,
    results: Records,
    patterns: Option<Records>,
}

impl ShardTables {
    fn open(dir: &Path, plan: &Plan) -> Result<Self, SweepError> {
        Self::open_files(plan, |name| dir.join(name))
    }

    /// The partial tables of the unfinished sweep in `dir`.
    pub(super) fn open_partial(dir: &Path, plan: &Plan) -> Result<Self, SweepError> {
        Self::open_files(plan, |name| crate::text::partial_path(&dir.join(name)))
    }

    /// Opens the tables at `path(file name)`.
    fn open_files(plan: &Plan, path: impl Fn(&str) -> PathBuf) -> Result<Self, SweepError> {
        let header = results_header(plan);
        Ok(Self {
            error_column: error_column(&plan.axes),
            results: Records::open(path("results.csv"), &header)?,
            header,
            patterns: match patterns_header(plan) {
                Some(header) => Some(Records::open(path("patterns.csv"), &header)?),
                None => None,
            },
        })
    }

    /// The records of point `p`, which must have a row per run.
    pub(super) fn point(&mut self, p: usize, runs: usize) -> Result<PointRecords, SweepError> {
        let results = self.results.take(p)?;
        if results.len() != runs {
            return Err(SweepError::BadInput(format!(
                "{}: {} rows of point {p}; expected {runs}, one per seed, in the order shard.toml lists the points",
                self.results.path.display(),
                results.len()
            )));
        }
        // A run never measures an infinite, undefined or negative figure, nor one beyond
        // the 64-bit counts its times, bytes and events are kept in: one would make the
        // plots' axes endless or the summaries nonsense.
        for (run, record) in results.iter().enumerate() {
            let bad = record
                .iter()
                .enumerate()
                .skip(self.error_column + 1)
                .find(|(_, c)| c.parse::<f64>().is_ok_and(|v| !measurable(v)));
            if let Some((column, cell)) = bad {
                return Err(SweepError::BadInput(format!(
                    "{}: point {p}, run {}, column {}: {cell:?} is not a figure a run measures (a finite number from 0 to 2^64)",
                    self.results.path.display(),
                    run + 1,
                    self.header[column]
                )));
            }
        }
        let patterns = match self.patterns.as_mut() {
            Some(patterns) => patterns.take(p)?,
            None => Vec::new(),
        };
        Ok(PointRecords {
            point: p,
            results,
            patterns,
        })
    }

    /// Checks that every record was taken.
    fn finish(self) -> Result<(), SweepError> {
        self.results.finish()?;
        self.patterns.map_or(Ok(()), Records::finish)
    }
}

/// Whether `v` can be a figure of a run: every figure (times in ns, bytes, counts,
/// ratios) is finite, at least 0 and within the `u64` the simulator counts in.
fn measurable(v: f64) -> bool {
    v.is_finite() && (0.0..=u64::MAX as f64).contains(&v)
}

/// A CSV file's records, read in order.
struct Records {
    path: PathBuf,
    rows: Peekable<csv::StringRecordsIntoIter<File>>,
}

impl Records {
    /// Opens `path`, whose header must be `header`.
    fn open(path: PathBuf, header: &[String]) -> Result<Self, SweepError> {
        let bad =
            |e: &dyn std::fmt::Display| SweepError::BadInput(format!("{}: {e}", path.display()));
        let mut reader = csv::Reader::from_path(&path).map_err(|e| bad(&e))?;
        let columns = reader.headers().map_err(|e| bad(&e))?;
        if !columns.iter().eq(header.iter().map(String::as_str)) {
            return Err(bad(
                &"its columns are not this sweep's; expected the file `gpuswap sweep --shard` wrote",
            ));
        }
        Ok(Self {
            rows: reader.into_records().peekable(),
            path,
        })
    }

    /// The records at the front whose point (first cell) is `p`.
    fn take(&mut self, p: usize) -> Result<Vec<Vec<String>>, SweepError> {
        let point = p.to_string();
        let mut taken = Vec::new();
        // A read error is taken too, to be reported.
        while let Some(next) = self.rows.next_if(|r| {
            r.as_ref()
                .map_or(true, |r| r.get(0) == Some(point.as_str()))
        }) {
            let record =
                next.map_err(|e| SweepError::BadInput(format!("{}: {e}", self.path.display())))?;
            taken.push(record.iter().map(String::from).collect());
        }
        Ok(taken)
    }

    /// Checks that no record is left.
    fn finish(mut self) -> Result<(), SweepError> {
        match self.rows.next() {
            None => Ok(()),
            Some(Ok(r)) => Err(SweepError::BadInput(format!(
                "{}: a row of point {} is left over; expected only the points shard.toml lists, in order",
                self.path.display(),
                r.get(0).unwrap_or_default()
            ))),
            Some(Err(e)) => Err(SweepError::BadInput(format!(
                "{}: {e}",
                self.path.display()
            ))),
        }
    }
}
