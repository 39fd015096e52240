//! Sweeps: one scenario run across a grid of settings, several seeds per grid point, in
//! parallel; results as CSV tables and plots.
//!
//! The grid comes from the scenario's `[sweep]` table and from `--vary`:
//!
//! ```toml
//! [sweep]
//! runs = 10                                   # seeds per grid point
//! [sweep.vary]
//! "device.vram_limit" = "20MiB..500MiB step 20MiB"
//! "manager.chunk_policy" = ["random", "priority-buffer"]
//! ```
//!
//! A key is a dotted path into the scenario (`seed`, `device.preset`, `manager.mode`,
//! `tenant.repeat` for every tenant, `tenant[1].start` for one), a whole table
//! (`manager = [{ mode = "gpuswap", chunk_policy = "random" }, { mode = "gdev" }]`), or
//! keys joined by `+` that take the same value (`"tenant[0].app+tenant[1].app"`). Run
//! `r` of a point uses seed `scenario seed + r`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gpuswap_sim::report::{Baselines, Report, TenantReport, run_and_report_with};
use gpuswap_sim::units::{parse_bytes, parse_ns};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use thiserror::Error;
use toml::Value;

use crate::plot::{self, Line, LinePoint};
use crate::scenario;

/// What went wrong with a sweep as a whole (single failed runs are rows, not errors).
#[derive(Debug, Error)]
pub enum SweepError {
    /// The scenario, a `--vary` flag or the `[sweep]` table is wrong.
    #[error("{0}")]
    BadInput(String),
    /// Results could not be written.
    #[error("{0}")]
    Output(String),
}

/// Settings of a sweep from the command line.
#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// The scenario (TOML), optionally with a `[sweep]` table.
    pub scenario: PathBuf,
    /// Vary a scenario key: KEY=V1,V2,... or KEY=FROM..TO step STEP (repeatable).
    #[arg(long = "vary", value_name = "KEY=VALUES")]
    pub vary: Vec<String>,
    /// Runs (seeds) per grid point; overrides `[sweep]` runs.
    #[arg(long)]
    pub runs: Option<u32>,
    /// Output folder (default: results/SCENARIO-NAME).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write PNG plots.
    #[arg(long)]
    pub png: bool,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// One varied key and its values.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    /// Dotted scenario key.
    pub key: String,
    /// Values, as TOML values of the type the scenario uses for the key.
    pub values: Vec<Value>,
}

/// One run of the sweep and what came out.
#[derive(Debug)]
pub struct Row {
    /// Index of the grid point.
    pub point: usize,
    /// Run number at the point.
    pub run: u32,
    /// Seed used.
    pub seed: u64,
    /// What the outputs need of the run's report, or why the run failed.
    pub result: Result<RunFigures, String>,
}

/// What the outputs keep of one run's report: the summary metrics and the per-tenant
/// columns of results.csv, taken in the worker right after the run. A whole report holds
/// every tenant's VRAM timeline, so keeping it in every row made a sweep's memory grow
/// with the length of its runs as well as their number; these are fixed-size.
#[derive(Clone, Debug, PartialEq)]
pub struct RunFigures {
    /// The [`SUMMARY_METRICS`], in order; None where a metric has no value.
    pub metrics: [Option<f64>; SUMMARY_METRICS.len()],
    /// Per tenant of the base scenario, by name; None when the run had no tenant of that
    /// name (a varied name).
    pub tenants: Vec<Option<TenantFigures>>,
    /// Whether any tenant of the run failed (out of memory, a gdev refusal).
    pub tenant_failed: bool,
    /// Discrete events the simulation processed.
    pub events: u64,
}

impl RunFigures {
    /// Takes the figures of a report; `tenants` names the base scenario's tenants, the
    /// columns of results.csv.
    pub fn of(report: &Report, tenants: &[String]) -> Self {
        Self {
            metrics: SUMMARY_METRICS.map(|m| metric(report, m)),
            tenants: tenants
                .iter()
                .map(|name| {
                    report
                        .tenants
                        .iter()
                        .find(|t| t.name == *name)
                        .map(TenantFigures::of)
                })
                .collect(),
            tenant_failed: report.tenants.iter().any(|t| t.error.is_some()),
            events: report.events,
        }
    }

    /// The value of a summary metric.
    fn metric(&self, name: &str) -> Option<f64> {
        let i = SUMMARY_METRICS.iter().position(|m| *m == name)?;
        self.metrics[i]
    }
}

/// One tenant's columns of results.csv.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantFigures {
    /// The values of [`TENANT_COLUMNS`], in order.
    pub values: [Figure; TENANT_COLUMNS.len()],
    /// Why the tenant stopped early.
    pub error: Option<String>,
}

impl TenantFigures {
    fn of(t: &TenantReport) -> Self {
        Self {
            values: TENANT_COLUMNS.map(|(_, take)| take(t)),
            error: t.error.clone(),
        }
    }

    /// The cells: the columns, then the error.
    fn cells(&self) -> Vec<String> {
        let mut cells: Vec<String> = self.values.iter().map(|v| v.cell()).collect();
        cells.push(self.error.clone().unwrap_or_default());
        cells
    }
}

/// A number of results.csv, kept as a number until it is written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Figure {
    /// A whole number: nanoseconds or bytes.
    Count(u64),
    /// A ratio; an empty cell when undefined (a failed tenant's slowdown).
    Ratio(Option<f64>),
}

impl Figure {
    fn cell(self) -> String {
        match self {
            Self::Count(n) => n.to_string(),
            Self::Ratio(r) => r.map_or(String::new(), |r| format!("{r:.6}")),
        }
    }
}

/// A sweep ready to run: the scenario without its `[sweep]` table, the axes, the grid.
pub struct Plan {
    path: PathBuf,
    table: toml::Table,
    axes: Vec<Axis>,
    /// Runs (seeds) per grid point.
    pub runs: u32,
    /// The grid points.
    pub points: Vec<Vec<Value>>,
    /// The scenario as given, for names and defaults.
    pub base: scenario::Scenario,
}

impl Plan {
    /// Reads a scenario text with its `[sweep]` table and `--vary` flags; `path` names it
    /// in errors and resolves relative files.
    pub fn new(
        path: &Path,
        text: &str,
        vary: &[String],
        runs: Option<u32>,
    ) -> Result<Self, SweepError> {
        let bad = |m: String| SweepError::BadInput(format!("{}: {m}", path.display()));
        let mut table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| bad(e.to_string()))?;
        let sweep = table.remove("sweep");
        let (mut axes, file_runs) = sweep_table(sweep.as_ref(), &table).map_err(&bad)?;
        for flag in vary {
            let axis = parse_vary_flag(flag, &table)
                .map_err(|m| SweepError::BadInput(format!("--vary {flag:?}: {m}")))?;
            axes.retain(|a| a.key != axis.key);
            axes.push(axis);
        }
        // Two axes that set the same key would silently override each other.
        for (i, a) in axes.iter().enumerate() {
            for b in &axes[i + 1..] {
                if overlaps(&a.key, &b.key) {
                    return Err(SweepError::BadInput(format!(
                        "{}: the varied keys {:?} and {:?} set the same setting; vary one of them",
                        path.display(),
                        a.key,
                        b.key
                    )));
                }
            }
        }
        let runs = runs.or(file_runs).unwrap_or(1);
        if runs == 0 {
            return Err(SweepError::BadInput("--runs: expected at least 1".into()));
        }
        // The base scenario must be valid on its own: catches mistakes before any run.
        let base = scenario::parse(path, &text_without_sweep(&table))
            .map_err(|e| SweepError::BadInput(e.to_string()))?;
        let points = grid(&axes);
        Ok(Self {
            path: path.to_owned(),
            table,
            axes,
            runs,
            points,
            base,
        })
    }

    /// The values a key takes, if it is varied.
    pub fn values(&self, key: &str) -> Option<&[Value]> {
        self.axes
            .iter()
            .find(|a| a.key == key)
            .map(|a| a.values.as_slice())
    }

    /// Runs every point `runs` times in parallel (`jobs` threads, default one per core).
    pub fn execute(&self, jobs: Option<usize>, quiet: bool) -> Result<Vec<Row>, SweepError> {
        let work: Vec<(usize, u32)> = (0..self.points.len())
            .flat_map(|p| (0..self.runs).map(move |r| (p, r)))
            .collect();
        let progress = if quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(work.len() as u64)
        };
        progress.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} runs, {elapsed} elapsed, eta {eta}")
                .expect("valid template"),
        );
        let baselines = Baselines::default();
        let tenants = self.tenants();
        let all = || {
            work.par_iter()
                .map(|&(point, run)| {
                    let row = self.run_point(point, run, &baselines, &tenants);
                    progress.inc(1);
                    row
                })
                .collect::<Vec<Row>>()
        };
        let rows = match jobs {
            Some(n) => rayon::ThreadPoolBuilder::new()
                .num_threads(n.max(1))
                .build()
                .map_err(|e| SweepError::BadInput(format!("--jobs: {e}")))?
                .install(all),
            None => all(),
        };
        progress.finish_and_clear();
        Ok(rows)
    }

    /// The base scenario's tenant names: the tenants of results.csv.
    pub fn tenants(&self) -> Vec<String> {
        self.base
            .config
            .tenants
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }
}

/// Runs a sweep and writes its results.
pub fn run(args: &SweepArgs) -> Result<(), SweepError> {
    let text = std::fs::read_to_string(&args.scenario).map_err(|e| {
        SweepError::BadInput(format!("{}: cannot read: {e}", args.scenario.display()))
    })?;
    let plan = Plan::new(&args.scenario, &text, &args.vary, args.runs)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("results").join(&plan.base.name));
    let rows = plan.execute(args.jobs, args.quiet)?;
    write_outputs(
        &out,
        &plan.axes,
        &plan.points,
        &rows,
        &plan.tenants(),
        args.png,
    )?;
    let failed = rows.iter().filter(|r| r.result.is_err()).count();
    println!(
        "{} runs ({} grid points x {} seeds), {failed} failed; wrote {}",
        rows.len(),
        plan.points.len(),
        plan.runs,
        out.display()
    );
    Ok(())
}

fn text_without_sweep(table: &toml::Table) -> String {
    toml::to_string(table).expect("tables serialize")
}

/// Reads `[sweep]`: `runs` and `vary`.
fn sweep_table(
    sweep: Option<&Value>,
    scenario: &toml::Table,
) -> Result<(Vec<Axis>, Option<u32>), String> {
    let Some(sweep) = sweep else {
        return Ok((Vec::new(), None));
    };
    let table = sweep.as_table().ok_or("sweep: expected a table")?;
    let mut runs = None;
    let mut axes = Vec::new();
    for (key, value) in table {
        match key.as_str() {
            "runs" => {
                let n = value
                    .as_integer()
                    .filter(|n| *n >= 1 && *n <= i64::from(u32::MAX));
                runs = Some(n.ok_or("sweep.runs: expected a whole number of at least 1")? as u32);
            }
            "vary" => {
                let vary = value
                    .as_table()
                    .ok_or("sweep.vary: expected a table of key = values")?;
                for (path, values) in vary {
                    let values = match values {
                        Value::Array(items) if !items.is_empty() => items.clone(),
                        Value::String(text) if text.contains("..") => expand_range(text)
                            .map_err(|m| format!("sweep.vary.{path:?}: {m}"))?
                            .into_iter()
                            .map(|v| typed(v, path, scenario))
                            .collect(),
                        _ => {
                            return Err(format!(
                                "sweep.vary.{path:?}: expected a list of values or a range \"FROM..TO step STEP\""
                            ));
                        }
                    };
                    check_path(path, scenario).map_err(|m| format!("sweep.vary.{path:?}: {m}"))?;
                    axes.push(Axis {
                        key: path.clone(),
                        values,
                    });
                }
            }
            other => return Err(format!("sweep.{other}: unknown key; expected runs or vary")),
        }
    }
    Ok((axes, runs))
}

/// Reads `KEY=V1,V2` or `KEY=FROM..TO step STEP`.
pub fn parse_vary_flag(flag: &str, scenario: &toml::Table) -> Result<Axis, String> {
    let (key, values) = flag
        .split_once('=')
        .ok_or("expected KEY=V1,V2,... or KEY=FROM..TO step STEP")?;
    let key = key.trim();
    check_path(key, scenario)?;
    let texts = if values.contains("..") {
        expand_range(values)?
    } else {
        values
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect()
    };
    if texts.is_empty() {
        return Err("expected at least one value".into());
    }
    Ok(Axis {
        key: key.to_owned(),
        values: texts.into_iter().map(|t| typed(t, key, scenario)).collect(),
    })
}

/// Expands `FROM..TO step STEP` (inclusive when TO is on the grid) for sizes, durations or
/// whole numbers; values are written in the largest unit (of FROM's kind: binary or
/// decimal sizes, durations) that divides them all.
pub fn expand_range(text: &str) -> Result<Vec<String>, String> {
    let expected = "expected FROM..TO step STEP, e.g. \"20MiB..500MiB step 20MiB\", \"1s..5s step 1s\" or \"1..10 step 1\"";
    let (range, step) = text.split_once(" step ").ok_or(expected)?;
    let (from, to) = range.split_once("..").ok_or(expected)?;
    let (from, to, step) = (from.trim(), to.trim(), step.trim());
    // Each family: a parser and its units, largest first; decimal sizes are a family of
    // their own so that "100MB.." stays in MB.
    type Parser = fn(&str) -> Option<u64>;
    const BINARY: &[(&str, u64)] = &[
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("B", 1),
    ];
    const DECIMAL: &[(&str, u64)] = &[
        ("GB", 1_000_000_000),
        ("MB", 1_000_000),
        ("KB", 1_000),
        ("B", 1),
    ];
    const TIME: &[(&str, u64)] = &[
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
        ("ns", 1),
    ];
    let decimal = ["KB", "MB", "GB"].iter().any(|u| from.ends_with(u));
    let families: [(Parser, &[(&str, u64)]); 3] = [
        (
            |t| parse_bytes(t).ok(),
            if decimal { DECIMAL } else { BINARY },
        ),
        (|t| parse_ns(t).ok(), TIME),
        (|t| t.parse::<u64>().ok(), &[("", 1)]),
    ];
    for (parse, units) in families {
        let (Some(a), Some(b), Some(s)) = (parse(from), parse(to), parse(step)) else {
            continue;
        };
        if s == 0 {
            return Err("the step must be positive".into());
        }
        if b < a {
            return Err(format!("{to} is below {from}"));
        }
        let count = (b - a) / s + 1;
        if count > 100_000 {
            return Err(format!("{count} values; expected at most 100000"));
        }
        // The largest unit of the family that divides every value.
        let (name, scale) = units
            .iter()
            .find(|(_, scale)| (0..count).all(|i| (a + i * s) % scale == 0))
            .copied()
            .unwrap_or(units[units.len() - 1]);
        return Ok((0..count)
            .map(|i| format!("{}{name}", (a + i * s) / scale))
            .collect());
    }
    Err(expected.into())
}

/// Turns a value written as text into the TOML type the scenario uses at `path` (or an
/// integer for `seed` and `repeat`, a string otherwise).
fn typed(text: String, path: &str, scenario: &toml::Table) -> Value {
    let existing = lookup(scenario, path);
    let wants_integer = match existing {
        Some(Value::Integer(_)) => true,
        Some(_) => false,
        None => path == "seed" || path.ends_with(".repeat"),
    };
    match text.parse::<i64>() {
        Ok(n) if wants_integer => Value::Integer(n),
        _ => Value::String(text),
    }
}

fn lookup<'a>(scenario: &'a toml::Table, path: &str) -> Option<&'a Value> {
    // A joint key ("a+b") takes the type of its first part.
    let t = target(path.split('+').next()?).ok()?;
    let table = match (t.section, t.tenant) {
        (None, _) => scenario,
        (Some(s), None) => scenario.get(s)?.as_table()?,
        (Some(s), Some(i)) => scenario.get(s)?.as_array()?.get(i)?.as_table()?,
    };
    table.get(t.key)
}

/// Where a key path points: a table (none for top-level keys), for `tenant[i]` one
/// tenant (`tenant.x` means every tenant), and the key in it.
struct Target<'a> {
    section: Option<&'a str>,
    tenant: Option<usize>,
    key: &'a str,
}

fn target(path: &str) -> Result<Target<'_>, String> {
    let expected = "expected a scenario key such as seed, device.vram_limit, manager.chunk_policy, manager (a table), tenant.repeat or tenant[1].start";
    let (section, key) = match path.split_once('.') {
        // Top-level keys: the seed, or a whole table (its entries replace the scenario's).
        None if ["seed", "device", "manager"].contains(&path) => {
            return Ok(Target {
                section: None,
                tenant: None,
                key: path,
            });
        }
        None => return Err(expected.into()),
        Some((_, key)) if key.contains('.') || key.is_empty() => {
            return Err(format!("{path}: {expected}"));
        }
        Some(split) => split,
    };
    match section {
        "device" | "manager" | "tenant" => Ok(Target {
            section: Some(section),
            tenant: None,
            key,
        }),
        _ => {
            let index = section
                .strip_prefix("tenant[")
                .and_then(|rest| rest.strip_suffix(']'))
                .and_then(|i| i.parse::<usize>().ok())
                .ok_or(expected)?;
            Ok(Target {
                section: Some("tenant"),
                tenant: Some(index),
                key,
            })
        }
    }
}

/// Whether two key paths can set the same scenario value: equal parts, or a whole table
/// and a key inside it (`manager` and `manager.chunk_policy`), or every tenant and one.
fn overlaps(a: &str, b: &str) -> bool {
    let section = |k: &str| {
        k.split('.')
            .next()
            .unwrap_or(k)
            .split('[')
            .next()
            .unwrap_or(k)
            .to_owned()
    };
    let field = |k: &str| k.split_once('.').map(|(_, f)| f.to_owned());
    a.split('+').any(|x| {
        b.split('+').any(|y| {
            section(x) == section(y)
                && match (field(x), field(y)) {
                    (Some(f), Some(g)) => {
                        f == g && (x == y || !x.contains('[') || !y.contains('['))
                    }
                    _ => true,
                }
        })
    })
}

/// Checks a key path; `a+b` joins keys that take the same value at every point (say the
/// app of two of three tenants).
fn check_path(path: &str, scenario: &toml::Table) -> Result<(), String> {
    for part in path.split('+') {
        if let Some(i) = target(part)?.tenant {
            let count = scenario
                .get("tenant")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            if i >= count {
                return Err(format!(
                    "the scenario has {count} tenants; expected an index below {count}"
                ));
            }
        }
    }
    Ok(())
}

/// Sets `path` (each part of a joint key) to `value` in a scenario table.
fn apply(scenario: &mut toml::Table, path: &str, value: &Value) {
    for part in path.split('+') {
        apply_one(scenario, part, value);
    }
}

fn apply_one(scenario: &mut toml::Table, path: &str, value: &Value) {
    let t = target(path).expect("checked when read");
    match t.section {
        None => match (scenario.get_mut(t.key), value) {
            (Some(Value::Table(existing)), Value::Table(entries)) => {
                existing.extend(entries.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => {
                scenario.insert(t.key.to_owned(), value.clone());
            }
        },
        Some("tenant") => {
            if let Some(Value::Array(tenants)) = scenario.get_mut("tenant") {
                for (i, tenant) in tenants.iter_mut().enumerate() {
                    if t.tenant.is_none_or(|want| want == i)
                        && let Some(table) = tenant.as_table_mut()
                    {
                        table.insert(t.key.to_owned(), value.clone());
                    }
                }
            }
        }
        Some(section) => {
            let entry = scenario
                .entry(section.to_owned())
                .or_insert_with(|| Value::Table(toml::Table::new()));
            if let Some(table) = entry.as_table_mut() {
                table.insert(t.key.to_owned(), value.clone());
            }
        }
    }
}

/// Every combination of the axes' values, first axis slowest.
pub fn grid(axes: &[Axis]) -> Vec<Vec<Value>> {
    axes.iter().fold(vec![Vec::new()], |points, axis| {
        points
            .iter()
            .flat_map(|p| {
                axis.values.iter().map(move |v| {
                    let mut next = p.clone();
                    next.push(v.clone());
                    next
                })
            })
            .collect()
    })
}

/// The seed of run `run` of a point whose scenario seed is `base`.
pub fn derive_seed(base: u64, run: u32) -> u64 {
    base.wrapping_add(u64::from(run))
}

impl Plan {
    /// Run `run` of point `index`, reduced to what the outputs need of its report.
    fn run_point(&self, index: usize, run: u32, baselines: &Baselines, tenants: &[String]) -> Row {
        let mut table = self.table.clone();
        for (axis, value) in self.axes.iter().zip(&self.points[index]) {
            apply(&mut table, &axis.key, value);
        }
        let seed = derive_seed(
            table.get("seed").and_then(Value::as_integer).unwrap_or(0) as u64,
            run,
        );
        let result = scenario::parse(&self.path, &text_without_sweep(&table))
            .map_err(|e| e.to_string())
            .and_then(|mut s| {
                s.set_seed(seed);
                // A bug in one run must not take the others down: it becomes that row's error.
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_and_report_with(&s.name, seed, &s.config, baselines)
                }));
                match run {
                    Ok(Ok(report)) => Ok(RunFigures::of(&report, tenants)),
                    Ok(Err(e)) => Err(format!("internal error: {e}")),
                    Err(_) => Err("internal error: the simulation panicked (please report)".into()),
                }
            });
        Row {
            point: index,
            run,
            seed,
            result,
        }
    }
}

/// The slowest tenant's measured phase: the runtime the paper's figures plot. None when a
/// tenant failed.
pub fn slowest_phase_ns(report: &Report) -> Option<u64> {
    if report.tenants.iter().any(|t| t.error.is_some()) {
        return None;
    }
    report.tenants.iter().map(|t| t.phase_ns).max()
}

/// Mean latency of the allocations that had to evict, over all tenants; None when none
/// had to.
pub fn eviction_mean_ns(report: &Report) -> Option<f64> {
    let count: u64 = report
        .tenants
        .iter()
        .map(|t| t.eviction_latency_ns.count)
        .sum();
    let total: u64 = report
        .tenants
        .iter()
        .map(|t| {
            let s = &t.eviction_split_ns;
            s.policy + s.dma_setup + s.dma + s.waiting
        })
        .sum();
    (count > 0).then(|| total as f64 / count as f64)
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Table(t) => t
            .iter()
            .map(|(k, v)| format!("{k}={}", value_text(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// System figures summarized per grid point.
const SUMMARY_METRICS: [&str; 7] = [
    "slowest_phase_ns",
    "makespan_ns",
    "stp",
    "antt",
    "jain_vram",
    "jain_slowdown",
    "eviction_mean_ns",
];

fn metric(report: &Report, name: &str) -> Option<f64> {
    let s = &report.system;
    match name {
        "slowest_phase_ns" => slowest_phase_ns(report).map(|ns| ns as f64),
        "makespan_ns" => Some(s.makespan_ns as f64),
        "stp" => Some(s.stp),
        "antt" => Some(s.antt),
        "jain_vram" => Some(s.jain_vram),
        "jain_slowdown" => Some(s.jain_slowdown),
        "eviction_mean_ns" => eviction_mean_ns(report),
        _ => None,
    }
}

/// A per-tenant column of results.csv: its name and how it is taken from a tenant's report.
type TenantColumn = (&'static str, fn(&TenantReport) -> Figure);

/// Per-tenant columns of results.csv and how each is taken from a tenant's report (an
/// error column follows them).
const TENANT_COLUMNS: [TenantColumn; 12] = [
    ("total_ns", |t| Figure::Count(t.total_ns)),
    ("phase_ns", |t| Figure::Count(t.phase_ns)),
    ("slowdown", |t| Figure::Ratio(t.slowdown)),
    ("vram_peak_bytes", |t| Figure::Count(t.vram_peak_bytes)),
    ("local_bytes", |t| Figure::Count(t.local_bytes)),
    ("remote_bytes", |t| Figure::Count(t.remote_bytes)),
    ("bytes_evicted", |t| Figure::Count(t.bytes_evicted)),
    ("bytes_returned", |t| Figure::Count(t.bytes_returned)),
    ("alloc_p50_ns", |t| Figure::Count(t.alloc_latency_ns.p50)),
    ("alloc_p99_ns", |t| Figure::Count(t.alloc_latency_ns.p99)),
    ("eviction_p50_ns", |t| {
        Figure::Count(t.eviction_latency_ns.p50)
    }),
    ("eviction_max_ns", |t| {
        Figure::Count(t.eviction_latency_ns.max)
    }),
];

/// The columns of results.csv: the point, its settings, the run, the summary metrics and
/// each tenant's columns.
fn results_header(axes: &[Axis], tenants: &[String]) -> Vec<String> {
    let mut header: Vec<String> = vec!["point".into()];
    header.extend(axes.iter().map(|a| a.key.clone()));
    header.extend(["run", "seed", "error"].map(String::from));
    header.extend(SUMMARY_METRICS.map(String::from));
    for t in tenants {
        header.extend(TENANT_COLUMNS.iter().map(|(c, _)| format!("{t}.{c}")));
        header.push(format!("{t}.error"));
    }
    header
}

/// A row of results.csv; a failed run has only its error, padded to `columns`.
fn results_record(row: &Row, point: &[Value], columns: usize) -> Vec<String> {
    let mut cells = vec![row.point.to_string()];
    cells.extend(point.iter().map(value_text));
    cells.extend([row.run.to_string(), row.seed.to_string()]);
    match &row.result {
        Ok(figures) => {
            cells.push(String::new());
            cells.extend(
                figures
                    .metrics
                    .iter()
                    .map(|v| v.map_or(String::new(), |v| format!("{v}"))),
            );
            for t in &figures.tenants {
                match t {
                    Some(t) => cells.extend(t.cells()),
                    None => cells.extend(vec![String::new(); TENANT_COLUMNS.len() + 1]),
                }
            }
        }
        Err(e) => {
            cells.push(e.clone());
            cells.resize(columns, String::new());
        }
    }
    cells
}

fn write_outputs(
    out: &Path,
    axes: &[Axis],
    points: &[Vec<Value>],
    rows: &[Row],
    tenants: &[String],
    png: bool,
) -> Result<(), SweepError> {
    let io = |what: &Path, e: &dyn std::fmt::Display| {
        SweepError::Output(format!("{}: {e}", what.display()))
    };
    std::fs::create_dir_all(out).map_err(|e| io(out, &e))?;

    let results = out.join("results.csv");
    let mut w = csv::Writer::from_path(&results).map_err(|e| io(&results, &e))?;
    let header = results_header(axes, tenants);
    w.write_record(&header).map_err(|e| io(&results, &e))?;
    for row in rows {
        w.write_record(results_record(row, &points[row.point], header.len()))
            .map_err(|e| io(&results, &e))?;
    }
    w.flush().map_err(|e| io(&results, &e))?;

    let summary = out.join("summary.csv");
    let mut w = csv::Writer::from_path(&summary).map_err(|e| io(&summary, &e))?;
    let mut header: Vec<String> = vec!["point".into()];
    header.extend(axes.iter().map(|a| a.key.clone()));
    header.extend(["runs", "failed", "tenant_failed"].map(String::from));
    for m in SUMMARY_METRICS {
        header.extend(["mean", "std", "min", "max"].map(|s| format!("{m}.{s}")));
    }
    w.write_record(&header).map_err(|e| io(&summary, &e))?;
    let stats = point_stats(points.len(), rows);
    for (p, point) in points.iter().enumerate() {
        let mut cells = vec![p.to_string()];
        cells.extend(point.iter().map(value_text));
        let at: Vec<&Row> = rows.iter().filter(|r| r.point == p).collect();
        cells.push(at.len().to_string());
        cells.push(at.iter().filter(|r| r.result.is_err()).count().to_string());
        // Runs that completed with a tenant that failed (out of memory, gdev refusals).
        let tenant_failed = at
            .iter()
            .filter_map(|r| r.result.as_ref().ok())
            .filter(|f| f.tenant_failed)
            .count();
        cells.push(tenant_failed.to_string());
        for m in SUMMARY_METRICS {
            match stats[p].get(m) {
                Some(s) => cells.extend([s.mean, s.std, s.min, s.max].map(|v| format!("{v}"))),
                None => cells.extend(std::iter::repeat_n(String::new(), 4)),
            }
        }
        w.write_record(&cells).map_err(|e| io(&summary, &e))?;
    }
    w.flush().map_err(|e| io(&summary, &e))?;

    // Plots per numeric setting, with a line per combination of the others (policies,
    // modes); a categorical setting gets its own plots only when nothing is numeric.
    let numeric: Vec<usize> = (0..axes.len())
        .filter(|k| axis_label(&axes[*k]).2)
        .collect();
    let plotted = if numeric.is_empty() {
        (0..axes.len().min(1)).collect()
    } else {
        numeric
    };
    for k in plotted {
        let axis = &axes[k];
        let (label, categories, _) = axis_label(axis);
        let name = axis.key.replace(['.', '[', ']'], "_");
        for (metric, scale, stem, title, y_label) in [
            (
                "slowest_phase_ns",
                1e9,
                "runtime",
                "slowest tenant's runtime",
                "runtime of the slowest tenant (s)",
            ),
            // The slowest phase can shrink when an eviction serializes the tenants (one
            // runs its phase alone); the makespan shows the whole picture.
            ("makespan_ns", 1e9, "makespan", "makespan", "makespan (s)"),
            (
                "eviction_mean_ns",
                1e6,
                "eviction-latency",
                "eviction latency",
                "mean latency of evicting allocations (ms)",
            ),
        ] {
            let lines = lines_for(k, axes, points, &stats, metric, scale);
            if lines.iter().all(|l| l.points.is_empty()) {
                continue;
            }
            let file = out.join(format!("{stem}-vs-{name}"));
            let title = format!("{title} vs {}", axis.key);
            plot::save(
                &file,
                (900, 560),
                png,
                &plot::LineChart {
                    title: &title,
                    x_label: &label,
                    y_label,
                    lines: &lines,
                    categories: categories.as_deref(),
                },
            )
            .map_err(SweepError::Output)?;
        }
    }
    Ok(())
}

/// Mean, standard deviation, minimum and maximum of a metric at a point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation (0 for one sample).
    pub std: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Stats {
    /// Statistics of a non-empty sample.
    pub fn of(xs: &[f64]) -> Option<Self> {
        if xs.is_empty() {
            return None;
        }
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = if xs.len() > 1 {
            xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        Some(Self {
            mean,
            std: var.sqrt(),
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

fn point_stats(points: usize, rows: &[Row]) -> Vec<BTreeMap<&'static str, Stats>> {
    (0..points)
        .map(|p| {
            SUMMARY_METRICS
                .iter()
                .filter_map(|m| {
                    let xs: Vec<f64> = rows
                        .iter()
                        .filter(|r| r.point == p)
                        .filter_map(|r| r.result.as_ref().ok().and_then(|f| f.metric(m)))
                        .collect();
                    Stats::of(&xs).map(|s| (*m, s))
                })
                .collect()
        })
        .collect()
}

/// How an axis's values sit on a plot's x axis: numbers in a unit, or categories.
/// How an axis's values sit on a plot's x axis: its label, the names of positions 0, 1,
/// ... when values are placed evenly (categories, or numbers spanning more than a factor
/// of 64, such as chunk sizes from 128 KiB to 128 MiB), and whether the values are
/// numbers.
fn axis_label(axis: &Axis) -> (String, Option<Vec<String>>, bool) {
    let texts: Vec<String> = axis.values.iter().map(value_text).collect();
    let (label, numbers): (String, Option<Vec<f64>>) =
        if texts.iter().all(|t| parse_bytes(t).is_ok()) {
            (
                format!("{} (MiB)", axis.key),
                Some(
                    texts
                        .iter()
                        .map(|t| parse_bytes(t).unwrap_or(0) as f64 / 1048576.0)
                        .collect(),
                ),
            )
        } else if texts.iter().all(|t| parse_ns(t).is_ok()) {
            (
                format!("{} (ms)", axis.key),
                Some(
                    texts
                        .iter()
                        .map(|t| parse_ns(t).unwrap_or(0) as f64 / 1e6)
                        .collect(),
                ),
            )
        } else if axis.values.iter().all(Value::is_integer) {
            (
                axis.key.clone(),
                Some(
                    axis.values
                        .iter()
                        .map(|v| v.as_integer().unwrap_or(0) as f64)
                        .collect(),
                ),
            )
        } else {
            (axis.key.clone(), None)
        };
    match numbers {
        None => (label, Some(texts), false),
        Some(xs) => {
            let (min, max) = xs
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(*x), b.max(*x)));
            let spread = min > 0.0 && max / min >= 64.0;
            (label, spread.then_some(texts), true)
        }
    }
}

fn x_of(value: &Value, index: usize, categorical: bool) -> f64 {
    if categorical {
        return index as f64;
    }
    let text = value_text(value);
    if let Ok(bytes) = parse_bytes(&text) {
        bytes as f64 / (1u64 << 20) as f64
    } else if let Ok(ns) = parse_ns(&text) {
        ns as f64 / 1e6
    } else {
        value.as_integer().unwrap_or(0) as f64
    }
}

/// One line per combination of the other axes' values: mean, std and best of `metric`
/// divided by `scale`.
fn lines_for(
    k: usize,
    axes: &[Axis],
    points: &[Vec<Value>],
    stats: &[BTreeMap<&str, Stats>],
    metric: &str,
    scale: f64,
) -> Vec<Line> {
    let categorical = axis_label(&axes[k]).1.is_some();
    let mut lines: BTreeMap<String, Vec<LinePoint>> = BTreeMap::new();
    for (p, point) in points.iter().enumerate() {
        let label: Vec<String> = point
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != k)
            .map(|(i, v)| match v {
                Value::Table(_) => value_text(v),
                _ => format!(
                    "{}={}",
                    axes[i].key.rsplit('.').next().unwrap_or(""),
                    value_text(v)
                ),
            })
            .collect();
        let index = axes[k]
            .values
            .iter()
            .position(|v| *v == point[k])
            .unwrap_or(0);
        if let Some(s) = stats[p].get(metric) {
            lines.entry(label.join(" ")).or_default().push(LinePoint {
                x: x_of(&point[k], index, categorical),
                mean: s.mean / scale,
                std: s.std / scale,
                best: s.min / scale,
            });
        }
    }
    lines
        .into_iter()
        .map(|(label, mut points)| {
            points.sort_by(|a, b| a.x.total_cmp(&b.x));
            Line { label, points }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    #[test]
    fn ranges_expand_inclusively_in_the_unit_of_from() {
        assert_eq!(
            expand_range("20MiB..100MiB step 20MiB").unwrap(),
            ["20MiB", "40MiB", "60MiB", "80MiB", "100MiB"]
        );
        assert_eq!(
            expand_range("128KiB..1MiB step 384KiB").unwrap(),
            ["128KiB", "512KiB", "896KiB"]
        );
        assert_eq!(expand_range("1s..3s step 1s").unwrap(), ["1s", "2s", "3s"]);
        assert_eq!(expand_range("1..10 step 4").unwrap(), ["1", "5", "9"]);
        assert_eq!(expand_range("1GiB..1GiB step 1MiB").unwrap(), ["1GiB"]);
        // Mixed units: written in the largest unit that divides every value.
        assert_eq!(
            expand_range("1GiB..1536MiB step 512MiB").unwrap(),
            ["1024MiB", "1536MiB"]
        );
    }

    #[test]
    fn bad_ranges_say_what_is_expected() {
        for bad in [
            "20MiB..10MiB step 1MiB",
            "1..5 step 0",
            "1..5",
            "a..b step c",
            "0..10000000 step 1",
        ] {
            let e = expand_range(bad).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        assert!(
            expand_range("1..5")
                .unwrap_err()
                .contains("FROM..TO step STEP")
        );
        assert!(
            expand_range("20MiB..10MiB step 1MiB")
                .unwrap_err()
                .contains("below")
        );
    }

    #[test]
    fn vary_flags_take_the_scenario_types() {
        let s = table(
            "seed = 1\n[device]\nvram_limit = \"1GiB\"\n[[tenant]]\napp = \"nn\"\nrepeat = 3\n",
        );
        let a = parse_vary_flag("tenant.repeat=1,2", &s).unwrap();
        assert_eq!(a.values, [Value::Integer(1), Value::Integer(2)]);
        let a = parse_vary_flag("device.vram_limit=20MiB..60MiB step 20MiB", &s).unwrap();
        assert_eq!(
            a.values,
            ["20MiB", "40MiB", "60MiB"].map(|v| Value::String(v.into()))
        );
        let a = parse_vary_flag("tenant[0].size=4096", &s).unwrap();
        assert_eq!(a.values, [Value::String("4096".into())]);
        assert!(
            parse_vary_flag("tenant[3].repeat=1", &s)
                .unwrap_err()
                .contains("1 tenants")
        );
        assert!(
            parse_vary_flag("colour=red", &s)
                .unwrap_err()
                .contains("expected a scenario key")
        );
        assert!(parse_vary_flag("seed", &s).is_err());
    }

    #[test]
    fn grid_is_the_cartesian_product() {
        let axes = [
            Axis {
                key: "a".into(),
                values: vec![Value::Integer(1), Value::Integer(2)],
            },
            Axis {
                key: "b".into(),
                values: ["x", "y", "z"].map(|v| Value::String(v.into())).into(),
            },
        ];
        let g = grid(&axes);
        assert_eq!(g.len(), 6);
        assert_eq!(g[0], [Value::Integer(1), Value::String("x".into())]);
        assert_eq!(g[5], [Value::Integer(2), Value::String("z".into())]);
        assert_eq!(grid(&[]), vec![Vec::<Value>::new()]);
    }

    #[test]
    fn overlapping_keys_are_detected() {
        assert!(overlaps("manager", "manager.chunk_policy"));
        assert!(overlaps("tenant.app", "tenant[1].app"));
        assert!(overlaps("tenant[0].app+tenant[1].app", "tenant[1].app"));
        assert!(overlaps("seed", "seed"));
        assert!(!overlaps("tenant[0].app", "tenant[1].app"));
        assert!(!overlaps("manager.mode", "manager.chunk_policy"));
        assert!(!overlaps("device.vram_limit", "manager.chunk_size"));
        assert!(!overlaps("tenant.app", "tenant.repeat"));
    }

    #[test]
    fn seeds_are_derived_from_the_scenario_seed() {
        assert_eq!(derive_seed(42, 0), 42);
        assert_eq!(derive_seed(42, 3), 45);
        assert_eq!(derive_seed(u64::MAX, 1), 0);
        let seeds: std::collections::BTreeSet<u64> = (0..10).map(|r| derive_seed(7, r)).collect();
        assert_eq!(seeds.len(), 10);
    }

    fn tenants_have(s: &toml::Table, key: &str, value: &str) -> bool {
        s["tenant"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t[key].as_str() == Some(value))
    }

    #[test]
    fn apply_sets_every_tenant_or_one() {
        let mut s = table("[[tenant]]\napp = \"nn\"\n[[tenant]]\napp = \"bfs\"\n");
        apply(&mut s, "tenant.repeat", &Value::Integer(5));
        apply(&mut s, "tenant[1].start", &Value::String("1s".into()));
        apply(&mut s, "device.vram_limit", &Value::String("20MiB".into()));
        apply(
            &mut s,
            "tenant[0].size+tenant[1].size",
            &Value::String("rodinia".into()),
        );
        assert!(
            check_path("tenant[0].size+tenant[7].size", &s)
                .unwrap_err()
                .contains("2 tenants")
        );
        let tenants = s["tenant"].as_array().unwrap();
        assert_eq!(tenants[0]["repeat"].as_integer(), Some(5));
        assert_eq!(tenants[1]["repeat"].as_integer(), Some(5));
        assert!(tenants[0].get("start").is_none());
        assert_eq!(tenants[1]["start"].as_str(), Some("1s"));
        assert_eq!(s["device"]["vram_limit"].as_str(), Some("20MiB"));
        assert!(tenants_have(&s, "size", "rodinia"));
    }

    /// Two nn tenants; 20 MiB makes them evict, 9 GiB is more than the GTX 480 has.
    const TWO_NN: &str = "seed = 5\n[device]\npreset = \"gtx480\"\n[manager]\nmode = \"gpuswap\"\n\
        [[tenant]]\nname = \"a\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n\
        [[tenant]]\nname = \"b\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n";

    /// What a results.csv column holds, read from the full report (as JSON) rather than
    /// through the sweep's own column table; None for the columns the row itself sets.
    fn from_report(report: &Report, column: &str) -> Option<f64> {
        let json = serde_json::to_value(report).unwrap();
        let number = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("{column}: {v}"));
        if ["point", "device.vram_limit", "run", "seed", "error"].contains(&column) {
            return None;
        }
        if let Some((tenant, field)) = column.split_once('.') {
            let t = json["tenants"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == tenant)
                .unwrap();
            let (summary, stat) = match field {
                "alloc_p50_ns" => ("alloc_latency_ns", "p50"),
                "alloc_p99_ns" => ("alloc_latency_ns", "p99"),
                "eviction_p50_ns" => ("eviction_latency_ns", "p50"),
                "eviction_max_ns" => ("eviction_latency_ns", "max"),
                "error" => {
                    assert!(t["error"].is_null());
                    return None;
                }
                field => return Some(number(&t[field])),
            };
            return Some(number(&t[summary][stat]));
        }
        Some(match column {
            "slowest_phase_ns" => slowest_phase_ns(report).unwrap() as f64,
            "eviction_mean_ns" => eviction_mean_ns(report).unwrap(),
            system => number(&json["system"][system]),
        })
    }

    #[test]
    fn rows_carry_exactly_the_results_columns() {
        let path = Path::new("two-nn.toml");
        let vary = ["device.vram_limit=20MiB,9GiB".to_owned()];
        let plan = Plan::new(path, TWO_NN, &vary, Some(1)).unwrap();
        let rows = plan.execute(Some(1), true).unwrap();
        assert_eq!(rows.len(), 2);
        let header = results_header(&plan.axes, &plan.tenants());

        let mut s = scenario::parse(
            path,
            &TWO_NN.replace("gtx480\"", "gtx480\"\nvram_limit = \"20MiB\""),
        )
        .unwrap();
        s.set_seed(rows[0].seed);
        let report =
            run_and_report_with(&s.name, s.seed, &s.config, &Baselines::default()).unwrap();
        assert!(
            report.tenants.iter().any(|t| t.bytes_evicted > 0),
            "no evictions to check"
        );
        let record = results_record(&rows[0], &plan.points[0], header.len());
        assert_eq!(record.len(), header.len());
        for (column, cell) in header.iter().zip(&record) {
            let Some(want) = from_report(&report, column) else {
                continue;
            };
            let got: f64 = cell
                .parse()
                .unwrap_or_else(|_| panic!("{column}: {cell:?}"));
            // Slowdowns are written with six decimals.
            assert!(
                (got - want).abs() <= 5e-7 * want.abs().max(1.0),
                "{column}: {got} != {want}"
            );
        }
        assert_eq!(rows[0].result.as_ref().unwrap().events, report.events);

        let failed = results_record(&rows[1], &plan.points[1], header.len());
        assert_eq!(failed.len(), header.len());
        assert!(failed[header.iter().position(|h| h == "error").unwrap()].contains("vram_limit"));
    }

    #[test]
    fn stats_of_a_sample() {
        let s = Stats::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!((s.mean, s.min, s.max), (2.5, 1.0, 4.0));
        assert!((s.std - 1.290_994).abs() < 1e-6);
        assert_eq!(Stats::of(&[5.0]).unwrap().std, 0.0);
        assert_eq!(Stats::of(&[]), None);
    }
}
