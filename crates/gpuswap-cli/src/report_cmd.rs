//! `gpuswap report DIR --html FILE`: a sweep's folder as one self-contained web page —
//! the scenario, every table (each CSV file), every figure (each SVG, inline), and how
//! to read them. Nothing on the page is fetched: no scripts, no style sheets, no images
//! by address, so it opens the same from a laptop, a cluster's shared disk or a mail.

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
    /// A file could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
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
    crate::text::write_atomically(html, &page).map_err(|e| io(html, e))
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

/// The page for the sweep folder `dir`.
pub fn page(dir: &Path) -> Result<String, ReportError> {
    crate::sweep::check_finished(dir).map_err(|e| io(dir, e))?;
    let results = dir.join("results.csv");
    if !results.is_file() {
        return Err(ReportError::NotASweep(dir.display().to_string()));
    }
    let title = dir
        .file_name()
        .map_or_else(|| "sweep".into(), |n| n.to_string_lossy().into_owned());
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>gpuswap: {}</title>\n<style>\n{}</style>\n</head>\n<body>\n<h1>gpuswap sweep: {}</h1>\n",
        escape(&title),
        STYLE,
        escape(&title)
    );
    let scenario = dir.join("scenario.toml");
    html.push_str("<h2>Scenario</h2>\n");
    match std::fs::read_to_string(&scenario) {
        Ok(text) => {
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
            let _ = writeln!(html, "<pre>{}</pre>", escape(&text));
        }
        Err(_) => html.push_str(
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
         times are the mean over seeds.</li>\n</ul>\n<details><summary>What every figure \
         means (gpuswap metrics)</summary>\n",
    );
    let _ = writeln!(html, "<pre>{}</pre>\n</details>", escape(GLOSSARY));
    let figures = files(dir, "svg")?;
    html.push_str("<h2>Figures</h2>\n");
    if figures.is_empty() {
        html.push_str("<p>No figures in this folder.</p>\n");
    }
    for figure in &figures {
        let svg = std::fs::read_to_string(figure).map_err(|e| io(figure, e))?;
        let _ = writeln!(
            html,
            "<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>",
            inline_svg(&svg),
            escape(&file_name(figure))
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

/// An SVG file's markup without its XML prolog, to sit inside HTML.
fn inline_svg(svg: &str) -> &str {
    svg.find("<svg").map_or(svg, |at| &svg[at..]).trim_end()
}

/// One CSV file as a table, folded when long.
fn table_html(path: &Path, html: &mut String) -> Result<(), ReportError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_path(path)
        .map_err(|e| io(path, e))?;
    let header = reader.headers().map_err(|e| io(path, e))?.clone();
    let mut rows = Vec::new();
    let mut total = 0;
    for record in reader.records() {
        let record = record.map_err(|e| io(path, e))?;
        total += 1;
        if rows.len() < MAX_ROWS {
            rows.push(record);
        }
    }
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
        for cell in row {
            let _ = write!(html, "<td>{}</td>", escape(cell));
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

/// The page's look: readable tables that scroll sideways, figures at their width.
const STYLE: &str = "\
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; padding: 0 1em; color: #222; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
figure { margin: 1.5em 0; }
figure svg { max-width: 100%; height: auto; }
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
        assert_eq!(html.matches("<svg").count(), 1);
        assert!(!html.contains("<?xml"), "prolog stripped");
        // Nothing is fetched: no scripts, links, images or addresses but the SVG namespace.
        for fetch in ["<script", "<link", "<img", "src=", "href="] {
            assert!(!html.contains(fetch), "{fetch}");
        }
        assert_eq!(html.matches("http").count(), 1, "the SVG namespace only");
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
