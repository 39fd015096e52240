//! Plots of sweep results (SVG, PNG on request).

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
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

/// Labels of a chart.
#[derive(Clone, Copy, Debug)]
struct Labels<'a> {
    title: &'a str,
    x: &'a str,
    y: &'a str,
}

/// Draws a measure against a varied setting: per line the mean with a standard-deviation
/// band and the best run dashed. `categories` names the x positions 0, 1, ... when the
/// values sit evenly. Writes `stem.svg`, and `stem.png` when `png`.
pub fn chart(
    stem: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    lines: &[Line],
    categories: Option<&[String]>,
    png: bool,
) -> Result<(), String> {
    register_font();
    let labels = Labels {
        title,
        x: x_label,
        y: y_label,
    };
    let svg = stem.with_extension("svg");
    draw(
        SVGBackend::new(&svg, (900, 560)).into_drawing_area(),
        labels,
        lines,
        categories,
    )?;
    if png {
        let png = stem.with_extension("png");
        draw(
            BitMapBackend::new(&png, (900, 560)).into_drawing_area(),
            labels,
            lines,
            categories,
        )?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    labels: Labels<'_>,
    lines: &[Line],
    categories: Option<&[String]>,
) -> Result<(), String> {
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
        .caption(labels.title, ("sans-serif", 22))
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
    mesh.x_desc(labels.x)
        .y_desc(labels.y)
        .x_label_formatter(&format_x)
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 13));
    if let Some(names) = categories {
        mesh.x_labels(names.len());
    }
    mesh.draw().map_err(e)?;
    for (i, line) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
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
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// Draws each tenant's VRAM over time as steps: x in seconds, y in MiB. `series` holds
/// (tenant, [(time_ns, bytes)]) with the timelines of the report. Writes `stem.svg`, and
/// `stem.png` when `png`.
pub fn vram_timeline(
    stem: &Path,
    title: &str,
    series: &[(String, Vec<(u64, u64)>)],
    end_ns: u64,
    png: bool,
) -> Result<(), String> {
    register_font();
    let svg = stem.with_extension("svg");
    draw_timeline(
        SVGBackend::new(&svg, (900, 520)).into_drawing_area(),
        title,
        series,
        end_ns,
    )?;
    if png {
        let png = stem.with_extension("png");
        draw_timeline(
            BitMapBackend::new(&png, (900, 520)).into_drawing_area(),
            title,
            series,
            end_ns,
        )?;
    }
    Ok(())
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
        let color = Palette99::pick(i).to_rgba();
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
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}
