//! `gpuswap report DIR --html FILE`: a sweep's folder as one self-contained web page —
//! a short answer (which setting did best), the scenario, every table (each CSV file,
//! numbers with units), every figure (each SVG, as an image), and how to read them.
//! Nothing on the page is fetched: no scripts, no style sheets, no images by address,
//! so it opens the same from a laptop, a cluster's shared disk or a mail. The folder
//! may be someone else's: its SVG files are embedded as images (`data:` addresses),
//! in which a browser runs no script they carry, never inlined into the page.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use thiserror::Error;

use crate::glossary::GLOSSARY;

/// Most rows a table shows; the rest stay in the CSV file (a sweep of thousands of runs
/// would make a page too slow to open).
const MAX_ROWS: usize = 2_000;

/// `gpuswap report`'s arguments.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    gpuswap sweep big.toml --out results && gpuswap report results --html results/index.html\n  \
    gpuswap report results/pilot --html pilot.html --force")]
pub struct ReportArgs {
    /// A sweep's output folder (results.csv, summary.csv, the plots).
    pub dir: PathBuf,
    /// Where to write the page.
    #[arg(long, value_name = "FILE")]
    pub html: PathBuf,
    /// Overwrite FILE if it exists.
    #[arg(long)]
    pub force: bool,
}

/// Why no page was written.
#[derive(Debug, Error)]
pub enum ReportError {
    /// The folder is not a sweep's.
    #[error(
        "{0}: expected a sweep's output folder (with results.csv); run gpuswap sweep FILE --out {0} first"
    )]
    NotASweep(String),
    /// A file could not be read.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The page could not be written (a full disk); nothing of it was left.
    #[error("{path}: cannot write: {message}")]
    Write {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
}

impl ReportError {
    /// The exit status: 1 when the page could not be written, 2 for a folder or a
    /// target that is not what was expected.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Write { .. } => 1,
            Self::NotASweep(_) | Self::Io { .. } => 2,
        }
    }
}

fn io(path: &Path, e: impl std::fmt::Display) -> ReportError {
    ReportError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Writes the page for `args.dir` to `args.html`.
pub fn run(args: &ReportArgs) -> Result<(), ReportError> {
    write_page(&args.dir, &args.html, args.force)
}

/// Writes the page for the sweep folder `dir` to `html`, replacing an existing file
/// only when `force`; a reader never sees half a page.
pub fn write_page(dir: &Path, html: &Path, force: bool) -> Result<(), ReportError> {
    check_target(html, force)?;
    let page = page(dir)?;
    crate::text::write_atomically(html, &page).map_err(|e| ReportError::Write {
        path: html.display().to_string(),
        message: e.to_string(),
    })
}

/// Whether the page may be written to `html`: a new file (or `force`) in a folder that
/// exists. `sweep --html` asks before it runs anything.
pub fn check_target(html: &Path, force: bool) -> Result<(), ReportError> {
    if html.exists() && !force {
        return Err(io(
            html,
            "exists; expected a new file, or --force to overwrite it",
        ));
    }
    match html.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) if !dir.is_dir() => Err(io(
            html,
            format!(
                "expected a file in an existing folder; {} is none",
                dir.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// The files of `dir` ending in `.ext`, by name.
fn files(dir: &Path, ext: &str) -> Result<Vec<PathBuf>, ReportError> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| io(dir, e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == ext) && p.is_file())
        .collect();
    found.sort();
    Ok(found)
}

/// Escapes text for HTML.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// What each of a sweep's files holds, for the page's guide.
const FILES: &[(&str, &str)] = &[
    (
        "summary.csv",
        "one row per grid point: each metric's mean, standard deviation, minimum and maximum over the point's runs (seeds)",
    ),
    (
        "normalized.csv",
        "with [sweep.normalize]: each point's metric over the baseline's at the same settings (1 = as the baseline; below 1 is better for times), with the counts beside",
    ),
    (
        "results.csv",
        "one row per run: the point, its settings, the seed, the system metrics and every tenant's figures (tenant[i].*)",
    ),
    (
        "patterns.csv",
        "for sweeps that page: each managed allocation's detected migration pattern and the plan chosen",
    ),
];

/// The page for the sweep folder `dir` (a finished one: `gpuswap report` asks
/// [`crate::sweep::check_finished`] first, `sweep --html` writes it at the end).
pub fn page(dir: &Path) -> Result<String, ReportError> {
    let results = dir.join("results.csv");
    if !results.is_file() {
        return Err(ReportError::NotASweep(dir.display().to_string()));
    }
    let scenario_file = dir.join("scenario.toml");
    let scenario = std::fs::read_to_string(&scenario_file).ok();
    let source = scenario.as_deref().and_then(swept_scenario);
    // Named after the scenario, as `gpuswap run` names a report; the folder is only
    // where it was written.
    let title = source
        .and_then(|path| Path::new(path).file_stem())
        .or_else(|| dir.file_name())
        .map_or_else(|| "sweep".into(), |n| n.to_string_lossy().into_owned());
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>gpuswap sweep: {}</title>\n<style>\n{}</style>\n</head>\n<body>\n<h1>gpuswap sweep: {}</h1>\n",
        escape(&title),
        STYLE,
        escape(&title)
    );
    let summary = dir.join("summary.csv");
    if summary.is_file() {
        let table = read_table(&summary, usize::MAX)?;
        html.push_str("<h2>Answer</h2>\n<ul>\n");
        for line in answer(&table, &axis_names(scenario.as_deref())) {
            let _ = writeln!(html, "<li>{line}</li>");
        }
        html.push_str("</ul>\n");
    }
    html.push_str("<h2>Scenario</h2>\n");
    match &scenario {
        Some(text) => {
            let device = text
                .lines()
                .map(str::trim)
                .find_map(|l| l.strip_prefix("preset"))
                .and_then(|rest| rest.split('"').nth(1));
            let device = device.unwrap_or(crate::scenario::DEFAULT_PRESET);
            let _ = writeln!(
                html,
                "<p>Device: <b>{}</b> (unless the sweep varies it)</p>",
                escape(device)
            );
            // The file's name, not where it lay on the machine that ran the sweep.
            let shown = match source {
                Some(path) => text.replacen(path, &file_name(Path::new(path)), 1),
                None => text.clone(),
            };
            let _ = writeln!(html, "<pre>{}</pre>", escape(&shown));
        }
        None => html.push_str(
            "<p>The folder holds no scenario.toml (sweeps before this page existed did not \
             keep it); the settings of each point are in the tables' first columns.</p>\n",
        ),
    }
    html.push_str("<h2>How to read this</h2>\n<ul>\n");
    for (file, what) in FILES {
        let _ = writeln!(html, "<li><code>{file}</code>: {}</li>", escape(what));
    }
    html.push_str(
        "<li>Figures plot one metric against the varied setting, a line per other setting; \
         times are the mean over seeds.</li>\n<li>Tables show times and sizes with their \
         units and three significant digits; hover over a cell for the value as the CSV \
         file holds it.</li>\n</ul>\n<details><summary>What every figure \
         means (gpuswap metrics)</summary>\n",
    );
    let _ = writeln!(html, "<pre>{}</pre>\n</details>", escape(GLOSSARY));
    let figures = files(dir, "svg")?;
    html.push_str("<h2>Figures</h2>\n");
    if figures.is_empty() {
        html.push_str("<p>No figures in this folder.</p>\n");
    }
    for figure in &figures {
        let svg = std::fs::read(figure).map_err(|e| io(figure, e))?;
        let name = escape(&file_name(figure));
        let _ = writeln!(
            html,
            "<figure>\n<img alt=\"{name}\" src=\"data:image/svg+xml;base64,{}\">\n<figcaption>{name}</figcaption>\n</figure>",
            base64(&svg),
        );
    }
    html.push_str("<h2>Tables</h2>\n");
    let mut tables = files(dir, "csv")?;
    // The guide's order: the summaries first, the long per-run table last.
    tables.sort_by_key(|p| {
        let name = file_name(p);
        (
            FILES
                .iter()
                .position(|(f, _)| *f == name)
                .unwrap_or(FILES.len()),
            name,
        )
    });
    for table in &tables {
        table_html(table, &mut html)?;
    }
    html.push_str("</body>\n</html>\n");
    Ok(html)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// The scenario file a sweep ran, as scenario.toml's first line names it (see
/// `sweep::folder`): "# The scenario of this sweep: PATH[ --vary ...], N runs ...".
fn swept_scenario(text: &str) -> Option<&str> {
    let rest = text
        .lines()
        .next()?
        .strip_prefix("# The scenario of this sweep: ")?;
    let end = rest.find(" --vary ").or_else(|| rest.rfind(", "))?;
    Some(&rest[..end])
}

/// Standard base64 (RFC 4648, padded): how the figures travel inside `data:` addresses.
fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A CSV file's header and up to `max_rows` rows, and how many rows it has.
struct CsvTable {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    total: usize,
}

fn read_table(path: &Path, max_rows: usize) -> Result<CsvTable, ReportError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_path(path)
        .map_err(|e| io(path, e))?;
    let header = reader.headers().map_err(|e| io(path, e))?;
    let header = header.iter().map(str::to_owned).collect();
    let mut rows = Vec::new();
    let mut total = 0;
    for record in reader.records() {
        let record = record.map_err(|e| io(path, e))?;
        total += 1;
        if rows.len() < max_rows {
            rows.push(record.iter().map(str::to_owned).collect());
        }
    }
    Ok(CsvTable {
        header,
        rows,
        total,
    })
}

/// One CSV file as a table, folded when long.
fn table_html(path: &Path, html: &mut String) -> Result<(), ReportError> {
    let CsvTable {
        header,
        rows,
        total,
    } = read_table(path, MAX_ROWS)?;
    let name = file_name(path);
    let open = if total <= 50 { " open" } else { "" };
    let _ = writeln!(
        html,
        "<details{open}><summary><code>{}</code>: {total} rows, {} columns</summary>\n<div class=\"scroll\"><table>",
        escape(&name),
        header.len()
    );
    html.push_str("<tr>");
    for h in &header {
        let _ = write!(html, "<th>{}</th>", escape(h));
    }
    html.push_str("</tr>\n");
    for row in &rows {
        html.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let column = header.get(i).map_or("", String::as_str);
            let shown = format_cell(column, cell);
            if shown == *cell {
                let _ = write!(html, "<td>{}</td>", escape(cell));
            } else {
                let _ = write!(
                    html,
                    "<td title=\"{}\">{}</td>",
                    escape(cell),
                    escape(&shown)
                );
            }
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table></div>\n");
    if total > rows.len() {
        let _ = writeln!(
            html,
            "<p>{} more rows in {}.</p>",
            total - rows.len(),
            escape(&name)
        );
    }
    html.push_str("</details>\n");
    Ok(())
}

/// A cell as a reader wants it: a time (a column ending `_ns`, its statistics
/// included) in ns, us, ms or s, a size (`_bytes`) in B to GiB, another fraction with
/// three significant digits; whole numbers (counts, seeds, points) and text as they are.
fn format_cell(column: &str, cell: &str) -> String {
    let Ok(value) = cell.parse::<f64>() else {
        return cell.to_owned();
    };
    let metric = ["mean", "std", "min", "max"]
        .iter()
        .find_map(|stat| column.strip_suffix(&format!(".{stat}")[..]))
        .unwrap_or(column);
    let whole = cell.bytes().all(|b| b.is_ascii_digit() || b == b'-');
    if !value.is_finite() || whole && !metric.ends_with("_ns") && !metric.ends_with("_bytes") {
        cell.to_owned()
    } else {
        format_value(metric, value)
    }
}

/// A metric's value (times and sizes by the column's suffix) with its unit, three
/// significant digits.
fn format_value(metric: &str, value: f64) -> String {
    if metric.ends_with("_ns") {
        format_ns(value)
    } else if metric.ends_with("_bytes") {
        format_bytes(value)
    } else {
        significant(value)
    }
}

/// `value` with three significant digits (scientific beyond the usual range).
fn significant(value: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    let magnitude = value.abs().log10().floor();
    if !(-3.0..6.0).contains(&magnitude) {
        return format!("{value:.2e}");
    }
    format!("{value:.*}", (2.0 - magnitude).max(0.0) as usize)
}

/// Nanoseconds in the largest unit that keeps a whole one, three significant digits.
fn format_ns(ns: f64) -> String {
    scaled(ns, &[(1e9, "s"), (1e6, "ms"), (1e3, "us"), (1.0, "ns")])
}

/// Bytes in the largest binary unit that keeps a whole one, three significant digits.
fn format_bytes(bytes: f64) -> String {
    const KIB: f64 = 1024.0;
    scaled(
        bytes,
        &[
            (KIB * KIB * KIB, "GiB"),
            (KIB * KIB, "MiB"),
            (KIB, "KiB"),
            (1.0, "B"),
        ],
    )
}

fn scaled(value: f64, units: &[(f64, &str)]) -> String {
    let (scale, unit) = units
        .iter()
        .find(|(scale, _)| value.abs() >= *scale)
        .copied()
        .unwrap_or(units[units.len() - 1]);
    if value == 0.0 {
        return format!("0 {unit}");
    }
    format!("{} {unit}", significant(value / scale))
}

/// Whether a figure is better high or low.
#[derive(Clone, Copy)]
enum Better {
    Lower,
    Higher,
}

/// The figures the answer compares, in order of preference (the first two a sweep has):
/// summary.csv's metric, what it is, which way is better.
const ANSWERED: [(&str, &str, Better); 5] = [
    ("antt", "ANTT (mean slowdown)", Better::Lower),
    ("stp", "STP (system throughput)", Better::Higher),
    (
        "slowest_total_ns",
        "runtime of the slowest tenant",
        Better::Lower,
    ),
    ("mean_fps", "mean frame rate (frames/s)", Better::Higher),
    ("switch_cycles", "cycles spent switching", Better::Lower),
];

/// Names for a varied key's values, from the scenario's `[sweep.normalize]` (`names`
/// for its `axis`): key, then the names in the axis's order.
fn axis_names(scenario: Option<&str>) -> Option<(String, Vec<String>)> {
    let value: toml::Value = toml::from_str(scenario?).ok()?;
    let normalize = value.get("sweep")?.get("normalize")?;
    let names = normalize.get("names")?.as_array()?;
    Some((
        normalize.get("axis")?.as_str()?.to_owned(),
        names
            .iter()
            .map(|n| n.as_str().map(str::to_owned))
            .collect::<Option<_>>()?,
    ))
}

/// The varied key the answer compares values of: the manager, mode, placement,
/// policy or scheduler when varied, else the first key whose values are not numbers;
/// None when every key is numeric.
fn compared_axis(axes: &[String], rows: &[Vec<String>]) -> Option<usize> {
    let chosen = ["manager", "mode", "placement", "policy", "scheduler"];
    axes.iter()
        .position(|key| chosen.iter().any(|c| key.contains(c)))
        .or_else(|| (0..axes.len()).find(|a| rows.iter().any(|r| r[a + 1].parse::<f64>().is_err())))
}

/// Lines of the page's answer, HTML: per figure of [`ANSWERED`] the value of the
/// compared key that did best on average, by how much, and the worst; only points where
/// every run and tenant finished count, and over the same combinations of the other
/// keys for every value (like with like).
fn answer(table: &CsvTable, names: &Option<(String, Vec<String>)>) -> Vec<String> {
    let header = &table.header;
    let column = |name: &str| header.iter().position(|h| h == name);
    let (Some(runs), Some(failed), Some(tenant_failed)) =
        (column("runs"), column("failed"), column("tenant_failed"))
    else {
        return vec![
            "summary.csv has no runs, failed and tenant_failed columns: no answer.".into(),
        ];
    };
    let axes = &header[1..runs];
    let rows = &table.rows;
    let clean = |r: &Vec<String>| r[failed] == "0" && r[tenant_failed] == "0";
    let Some(k) = compared_axis(axes, rows) else {
        return vec![
            "Every varied key is numeric: the figures show each metric against them.".into(),
        ];
    };
    // The key's values in the grid's order, and what the page calls them.
    let mut values: Vec<&str> = Vec::new();
    for r in rows {
        if !values.contains(&r[k + 1].as_str()) {
            values.push(&r[k + 1]);
        }
    }
    let label = |v: &str| -> String {
        let at = values.iter().position(|x| *x == v).unwrap_or(0);
        match names {
            Some((axis, names)) if *axis == axes[k] && names.len() == values.len() => {
                names[at].clone()
            }
            _ => v.to_owned(),
        }
    };
    let clean_rows: Vec<&Vec<String>> = rows.iter().filter(|r| clean(r)).collect();
    let mut lines = Vec::new();
    for (metric, what, better) in ANSWERED
        .iter()
        .filter(|(m, ..)| column(&format!("{m}.mean")).is_some())
        .take(2)
    {
        let mean = column(&format!("{metric}.mean")).expect("filtered");
        let Some((ranked, points)) = ranking(&clean_rows, axes.len(), k, &values, mean) else {
            continue;
        };
        let mut ranked: Vec<(&str, f64)> =
            ranked.into_iter().map(|(i, v)| (values[i], v)).collect();
        ranked.sort_by(|a, b| match better {
            Better::Lower => a.1.total_cmp(&b.1),
            Better::Higher => b.1.total_cmp(&a.1),
        });
        let shown = |v: f64| format_value(metric, v);
        let (best, next, worst) = (ranked[0], ranked[1], ranked[ranked.len() - 1]);
        let (word, way) = match better {
            Better::Lower => ("Lowest", "below"),
            Better::Higher => ("Highest", "above"),
        };
        let by = |other: f64| {
            if other == 0.0 {
                String::new()
            } else {
                let percent = 100.0 * (best.1 - other).abs() / other.abs();
                format!("{}% {way} ", significant(percent))
            }
        };
        let mut line = format!(
            "{word} {what} by {}: <b>{}</b>, {} on average over {points} comparable points, {}the next best ({}, {})",
            escape(&axes[k]),
            escape(&label(best.0)),
            shown(best.1),
            by(next.1),
            escape(&label(next.0)),
            shown(next.1),
        );
        if ranked.len() > 2 {
            let _ = write!(
                line,
                " and {}the worst ({}, {})",
                by(worst.1),
                escape(&label(worst.0)),
                shown(worst.1)
            );
        }
        line.push('.');
        lines.push(line);
    }
    if lines.is_empty() {
        lines.push(format!(
            "No value of {} has figures where every run and tenant finished at the same settings of the other keys: nothing to compare.",
            escape(&axes[k])
        ));
    }
    lines.extend(left_out(rows, &clean, k, &axes[k], &values, &label));
    lines
}

/// The compared key's `values` (column `k + 1`), by their index, with their mean
/// figure in column `mean` over the combinations of the other `axes` keys at which each
/// of them has a figure among `clean_rows` (like with like), and how many such
/// combinations there are; None when fewer than two values compare.
fn ranking(
    clean_rows: &[&Vec<String>],
    axes: usize,
    k: usize,
    values: &[&str],
    mean: usize,
) -> Option<(Vec<(usize, f64)>, usize)> {
    // Combinations of the other keys at which every value has a clean figure.
    let mut by_rest: BTreeMap<Vec<&str>, Vec<(usize, f64)>> = BTreeMap::new();
    for r in clean_rows {
        let Ok(v) = r[mean].parse::<f64>() else {
            continue;
        };
        let rest: Vec<&str> = (0..axes)
            .filter(|a| *a != k)
            .map(|a| r[a + 1].as_str())
            .collect();
        let at = values.iter().position(|x| *x == r[k + 1]).expect("listed");
        by_rest.entry(rest).or_default().push((at, v));
    }
    // A value that never ran clean (a placement that refuses VMs everywhere) cannot
    // be compared; the others still can, among themselves.
    let compared: Vec<usize> = (0..values.len())
        .filter(|i| by_rest.values().any(|vs| vs.iter().any(|(at, _)| at == i)))
        .collect();
    let complete: Vec<&Vec<(usize, f64)>> = by_rest
        .values()
        .filter(|vs| compared.iter().all(|i| vs.iter().any(|(at, _)| at == i)))
        .collect();
    if complete.is_empty() || compared.len() < 2 {
        return None;
    }
    let means = compared
        .iter()
        .map(|&i| {
            let xs: Vec<f64> = complete
                .iter()
                .flat_map(|vs| vs.iter().filter(|(at, _)| *at == i).map(|(_, v)| *v))
                .collect();
            (i, xs.iter().sum::<f64>() / xs.len() as f64)
        })
        .collect();
    Some((means, complete.len()))
}

/// The answer's lines on the points it left out, where a run or a tenant failed: how
/// many per value of the compared key (`k`, column `k + 1`, named `axis`), and the
/// values that never ran clean.
fn left_out(
    rows: &[Vec<String>],
    clean: &dyn Fn(&Vec<String>) -> bool,
    k: usize,
    axis: &str,
    values: &[&str],
    label: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let broken: Vec<&Vec<String>> = rows.iter().filter(|r| !clean(r)).collect();
    if broken.is_empty() {
        return Vec::new();
    }
    let mut per_value: BTreeMap<String, usize> = BTreeMap::new();
    for r in &broken {
        *per_value.entry(label(&r[k + 1])).or_default() += 1;
    }
    let list: Vec<String> = per_value
        .iter()
        .map(|(v, n)| format!("{} {n}", escape(v)))
        .collect();
    let mut lines = vec![format!(
        "Left out: {} of {} points where a run or a tenant failed (figures over the tenants that finished would flatter them); by {}: {}.",
        broken.len(),
        rows.len(),
        escape(axis),
        list.join(", ")
    )];
    let never: Vec<String> = values
        .iter()
        .filter(|v| rows.iter().filter(|r| r[k + 1] == **v).all(|r| !clean(r)))
        .map(|v| escape(&label(v)))
        .collect();
    if !never.is_empty() {
        lines.push(format!(
            "Not compared: {}, with a failed run or tenant at every point.",
            never.join(", ")
        ));
    }
    lines
}

/// The page's look: readable tables that scroll sideways, figures at their width.
const STYLE: &str = "\
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; padding: 0 1em; color: #222; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; }
figcaption { font-size: 0.9em; color: #555; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; white-space: nowrap; }
th { background: #eee; position: sticky; top: 0; }
summary { cursor: pointer; margin: 0.6em 0; }
";

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("gpuswap-report-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_page_holds_the_scenario_every_table_and_figure_inline() {
        let dir = sweep_dir("ok");
        std::fs::write(
            dir.join("scenario.toml"),
            "[device]\npreset = \"gtx480\"\n# a < b & c\n",
        )
        .unwrap();
        std::fs::write(dir.join("results.csv"), "point,app\n0,\"<nn>\"\n1,lud\n").unwrap();
        std::fs::write(dir.join("summary.csv"), "point,x.mean\n0,1.5\n").unwrap();
        std::fs::write(
            dir.join("makespan.svg"),
            "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\"><text>t</text></svg>\n",
        )
        .unwrap();
        let html = page(&dir).unwrap();
        assert!(html.contains("Device: <b>gtx480</b>"));
        assert!(html.contains("# a &lt; b &amp; c"), "escaped scenario");
        assert!(html.contains("<td>&lt;nn&gt;</td>"), "escaped cells");
        // Summary before results, as the guide orders them.
        assert!(
            html.find("summary.csv</code>: 1 rows").unwrap()
                < html.find("results.csv</code>: 2 rows").unwrap()
        );
        assert_eq!(html.matches("<img").count(), 1);
        // Nothing is fetched: no scripts, links, or addresses but the figures' data.
        for fetch in ["<script", "<link", "href=", "http"] {
            assert!(!html.contains(fetch), "{fetch}");
        }
        assert_eq!(
            html.matches("src=").count(),
            html.matches("src=\"data:image/svg+xml;base64,").count()
        );
    }

    /// A sweep folder from someone else may carry an SVG with a script: the page
    /// embeds it as an image, where a browser runs none of it, and holds no markup of it.
    #[test]
    fn a_hostile_svg_runs_no_code_on_the_page() {
        let dir = sweep_dir("hostile");
        std::fs::write(dir.join("results.csv"), "point\n0\n").unwrap();
        let hostile = "<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert(1)\">\
            <script>alert(2)</script><a href=\"javascript:alert(3)\"><rect/></a>\
            <foreignObject><body onload=\"alert(4)\"/></foreignObject></svg>";
        std::fs::write(dir.join("runtime.svg"), hostile).unwrap();
        let html = page(&dir).unwrap();
        for code in [
            "<svg",
            "<script",
            "onload",
            "javascript:",
            "foreignObject",
            "alert(",
        ] {
            assert!(!html.contains(code), "{code} on the page");
        }
        assert!(html.contains(&format!(
            "<img alt=\"runtime.svg\" src=\"data:image/svg+xml;base64,{}\">",
            base64(hostile.as_bytes())
        )));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn base64_pads_as_the_rfc_says() {
        let cases = [("", ""), ("M", "TQ=="), ("Ma", "TWE="), ("Man", "TWFu")];
        for (text, encoded) in cases {
            assert_eq!(base64(text.as_bytes()), encoded);
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00, 0x01]), "//4AAQ==");
    }

    #[test]
    fn cells_show_units_and_three_significant_digits() {
        let cases = [
            ("makespan_ns.mean", "839133564", "839 ms"),
            ("slowest_total_ns", "1606204664.2", "1.61 s"),
            ("a.alloc_p50_ns", "1234", "1.23 us"),
            ("eviction_mean_ns.std", "0", "0 ns"),
            ("a.vram_peak_bytes", "20971520", "20.0 MiB"),
            ("stp.mean", "1.6062046642478718", "1.61"),
            ("jain_vram.min", "0.49952843321", "0.500"),
            ("cycles_per_switch.mean", "123456789.5", "1.23e8"),
            ("pages_in.mean", "386048", "386048"),
            ("seed", "18446744073709551615", "18446744073709551615"),
            ("manager", "mode=uvm", "mode=uvm"),
            ("stp.mean", "", ""),
        ];
        for (column, cell, shown) in cases {
            assert_eq!(format_cell(column, cell), shown, "{column} = {cell}");
        }
    }

    /// The page is named after the scenario, shows its file name rather than where it
    /// lay, and starts with the answer: the best manager by ANTT and STP and by how much,
    /// over the points where every tenant finished.
    #[test]
    fn the_page_answers_first_and_is_named_after_the_scenario() {
        let dir = sweep_dir("answer");
        std::fs::write(
            dir.join("scenario.toml"),
            "# The scenario of this sweep: /home/someone/secret/pairs.toml --vary \"x=1\", 1 runs (seeds) per point.\n\
             [sweep.normalize]\naxis = \"manager\"\nnames = [\"slow\", \"fast\", \"broken\", \"refusing\"]\n",
        )
        .unwrap();
        std::fs::write(dir.join("results.csv"), "point\n").unwrap();
        std::fs::write(
            dir.join("summary.csv"),
            "point,manager,app,runs,failed,tenant_failed,stp.mean,antt.mean\n\
             0,m1,nn,1,0,0,1.0,2.0\n1,m2,nn,1,0,0,1.5,1.0\n2,m3,nn,1,0,1,2.0,0.5\n\
             3,m1,bfs,1,0,0,1.0,4.0\n4,m2,bfs,1,0,0,1.5,3.0\n5,m3,bfs,1,0,0,9.0,0.1\n\
             6,m4,nn,1,0,1,9.0,0.1\n7,m4,bfs,1,1,0,,\n",
        )
        .unwrap();
        let html = page(&dir).unwrap();
        assert!(
            html.contains("<title>gpuswap sweep: pairs</title>"),
            "named after the scenario"
        );
        assert!(
            !html.contains("/home/someone"),
            "the scenario's path shows as its name"
        );
        assert!(html.contains("sweep: pairs.toml --vary"));
        // A tenant failed under m3 with nn: like with like, every manager is compared
        // on bfs alone.
        let answer = &html[html.find("<h2>Answer").unwrap()..html.find("<h2>Scenario").unwrap()];
        assert!(
            answer.contains("Lowest ANTT (mean slowdown) by manager: <b>broken</b>, 0.100 on average over 1 comparable points, 96.7% below the next best (fast, 3.00) and 97.5% below the worst (slow, 4.00)."),
            "{answer}"
        );
        assert!(
            answer.contains("Highest STP (system throughput) by manager: <b>broken</b>"),
            "{answer}"
        );
        assert!(
            answer.contains("Left out: 3 of 8 points where a run or a tenant failed"),
            "{answer}"
        );
        assert!(
            answer.contains("by manager: broken 1, refusing 2."),
            "{answer}"
        );
        // m4 never ran clean: the others are compared without it, and it is named.
        assert!(
            answer.contains("Not compared: refusing, with a failed run or tenant at every point."),
            "{answer}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A full disk (the page's partial file is /dev/full): exit status 1 naming the
    /// file, and no page nor partial file is left.
    #[test]
    fn a_page_that_cannot_be_written_leaves_nothing_and_says_which() {
        if !Path::new("/dev/full").exists() {
            return;
        }
        let dir = sweep_dir("full");
        std::fs::write(dir.join("results.csv"), "point\n0\n").unwrap();
        let html = dir.join("index.html");
        let partial = crate::text::partial_path(&html);
        std::os::unix::fs::symlink("/dev/full", &partial).unwrap();
        let e = write_page(&dir, &html, false).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(
            e.to_string()
                .starts_with(&format!("{}: cannot write", html.display())),
            "{e}"
        );
        assert!(!html.exists() && partial.symlink_metadata().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn long_tables_are_cut_and_say_so_and_a_folder_without_results_is_refused() {
        let dir = sweep_dir("long");
        let mut csv = String::from("point\n");
        for i in 0..MAX_ROWS + 5 {
            csv += &format!("{i}\n");
        }
        std::fs::write(dir.join("results.csv"), csv).unwrap();
        let html = page(&dir).unwrap();
        assert!(html.contains("5 more rows in results.csv"));
        assert!(html.contains("no scenario.toml"));
        let empty = sweep_dir("empty");
        let e = page(&empty).unwrap_err().to_string();
        assert!(e.contains("expected a sweep's output folder"), "{e}");
    }
}
