//! Plots of sweep results (SVG, PNG on request).

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// One point of a runtime line: mean, standard deviation and best run, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinePoint {
    /// Position on the x axis.
    pub x: f64,
    /// Mean runtime.
    pub mean: f64,
    /// Standard deviation of the runtime.
    pub std: f64,
    /// Best (smallest) runtime.
    pub best: f64,
}

/// A labelled line.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// Legend text.
    pub label: String,
    /// Points in x order.
    pub points: Vec<LinePoint>,
}

/// Registers the embedded DejaVu Sans as plotters' "sans-serif", so text renders the same
/// on machines without system fonts.
pub fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and valid; registration cannot fail for it.
        let _ = plotters::style::register_font(
            "sans-serif",
            plotters::style::FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

/// Something that draws itself on any plotters backend, so one drawing serves SVG and
/// PNG.
pub trait Figure {
    /// Draws the figure on `root`.
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Writes `figure` to `stem.svg`, and to `stem.png` when `png`; returns the files written.
pub fn save(
    stem: &Path,
    pixels: (u32, u32),
    png: bool,
    figure: &impl Figure,
) -> Result<Vec<PathBuf>, String> {
    register_font();
    let svg = stem.with_extension("svg");
    let at = |path: &Path, e: String| format!("{}: {e}", path.display());
    figure
        .draw(SVGBackend::new(&svg, pixels).into_drawing_area())
        .map_err(|e| at(&svg, e))?;
    let mut written = vec![svg];
    if png {
        let png = stem.with_extension("png");
        figure
            .draw(BitMapBackend::new(&png, pixels).into_drawing_area())
            .map_err(|e| at(&png, e))?;
        written.push(png);
    }
    Ok(written)
}

/// A measure against a varied setting: per line the mean with a standard-deviation band
/// and the best run dashed. `categories` names the x positions 0, 1, ... when the values
/// sit evenly.
pub struct LineChart<'a> {
    /// Title.
    pub title: &'a str,
    /// X axis label.
    pub x_label: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// The lines.
    pub lines: &'a [Line],
    /// Names of evenly spaced x positions.
    pub categories: Option<&'a [String]>,
}

impl Figure for LineChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), String> {
        draw_lines(root, self)
    }
}

fn draw_lines<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    figure: &LineChart<'_>,
) -> Result<(), String> {
    let (lines, categories) = (figure.lines, figure.categories);
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let all = lines.iter().flat_map(|l| l.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for p in all {
        x0 = x0.min(p.x);
        x1 = x1.max(p.x);
        y1 = y1.max(p.mean + p.std).max(p.best);
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let pad = (x1 - x0) * 0.03;
    let mut chart = ChartBuilder::on(&root)
        .caption(figure.title, ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d(x0 - pad..x1 + pad, 0.0..(y1 * 1.08).max(1e-9))
        .map_err(e)?;
    let format_x = |x: &f64| match categories {
        Some(names) if (x.round() - x).abs() < 1e-9 && *x >= 0.0 => {
            names.get(x.round() as usize).cloned().unwrap_or_default()
        }
        Some(_) => String::new(),
        None => format!("{x}"),
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(figure.x_label)
        .y_desc(figure.y_label)
        .x_label_formatter(&format_x)
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 13));
    if let Some(names) = categories {
        mesh.x_labels(names.len());
    }
    mesh.draw().map_err(e)?;
    for (i, line) in lines.iter().enumerate() {
        let color = line_color(i);
        let band: Vec<(f64, f64)> = line
            .points
            .iter()
            .map(|p| (p.x, p.mean + p.std))
            .chain(
                line.points
                    .iter()
                    .rev()
                    .map(|p| (p.x, (p.mean - p.std).max(0.0))),
            )
            .collect();
        chart
            .draw_series(std::iter::once(Polygon::new(
                band,
                color.mix(0.18).filled(),
            )))
            .map_err(e)?;
        let label = if line.label.is_empty() {
            "mean".to_owned()
        } else {
            line.label.clone()
        };
        chart
            .draw_series(LineSeries::new(
                line.points.iter().map(|p| (p.x, p.mean)),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(format!("{label} (mean, band: std)"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(DashedLineSeries::new(
                line.points.iter().map(|p| (p.x, p.best)),
                6,
                4,
                color.stroke_width(1),
            ))
            .map_err(e)?
            .label(format!("{label} (best run)"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(1))
            });
    }
    finish(&root, &mut chart)
}

/// Each tenant's VRAM over time as steps: x in seconds, y in MiB; `series` holds
/// (tenant, [(time_ns, bytes)]) as the report's timelines do.
pub struct Timeline<'a> {
    /// Title.
    pub title: &'a str,
    /// One timeline per tenant.
    pub series: &'a [(String, Vec<(u64, u64)>)],
    /// Where the x axis ends: the last value holds until then.
    pub end_ns: u64,
}

impl Figure for Timeline<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), String> {
        draw_timeline(root, self.title, self.series, self.end_ns)
    }
}

fn draw_timeline<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    series: &[(String, Vec<(u64, u64)>)],
    end_ns: u64,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    const MIB: f64 = 1048576.0;
    let x1 = (end_ns as f64 / 1e9).max(1e-9);
    let y1 = series
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.1 as f64 / MIB))
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x1, 0.0..y1 * 1.08)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("VRAM held (MiB)")
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = line_color(i);
        // Steps: each value holds until the next change; the last until the end.
        let mut steps = Vec::with_capacity(points.len() * 2 + 1);
        for (j, (t, bytes)) in points.iter().enumerate() {
            let y = *bytes as f64 / MIB;
            steps.push((*t as f64 / 1e9, y));
            let next = points.get(j + 1).map_or(end_ns, |n| n.0);
            steps.push((next as f64 / 1e9, y));
        }
        chart
            .draw_series(LineSeries::new(steps, color.stroke_width(2)))
            .map_err(e)?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    finish(&root, &mut chart)
}

/// Draws the legend in the upper right corner and writes the figure out.
fn finish<'a, DB: DrawingBackend + 'a>(
    root: &DrawingArea<DB, Shift>,
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

/// Line colours: the ten of Tableau's qualitative palette (matplotlib's default cycle),
/// then plotters' larger palette. Palette99's first ones include near-identical shades,
/// so eight lines in one figure (one per app) were hard to tell apart.
fn line_color(i: usize) -> RGBAColor {
    const TABLEAU: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    match TABLEAU.get(i) {
        Some(&(r, g, b)) => RGBColor(r, g, b).to_rgba(),
        None => Palette99::pick(i).to_rgba(),
    }
}
