//! Plots of sweep results and VRAM timelines (SVG, PNG on request).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// A measure at one point over the runs that gave it a value: mean and range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Mean.
    pub mean: f64,
    /// Smallest value (the best run, for times).
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

/// One point of a line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinePoint {
    /// Position on the x axis.
    pub x: f64,
    /// The measure; None when no run gave it a value.
    pub value: Option<Spread>,
    /// A run at the point failed (it has no report).
    pub run_failed: bool,
    /// A run at the point ended with a tenant that failed.
    pub tenant_failed: bool,
}

/// A labelled line.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// Legend text; an unlabelled line (the only one of its figure) gets no legend entry.
    pub label: String,
    /// Palette slot of its colour (see [`color_slots`]).
    pub color: usize,
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
/// Each file is written whole or not at all (a full disk once left a 0-byte SVG); the
/// error names the file.
pub fn save(
    stem: &Path,
    pixels: (u32, u32),
    png: bool,
    figure: &impl Figure,
) -> Result<Vec<PathBuf>, String> {
    register_font();
    let svg = stem.with_extension("svg");
    let at = |path: &Path, e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let mut markup = String::new();
    figure
        .draw(SVGBackend::with_string(&mut markup, pixels).into_drawing_area())
        .map_err(|e| at(&svg, &e))?;
    crate::text::write_atomically(&svg, markup).map_err(|e| at(&svg, &e))?;
    let mut written = vec![svg];
    if png {
        let png = stem.with_extension("png");
        // The encoder picks the format by the extension: the partial name ends in it.
        let mut partial = png.file_stem().unwrap_or_default().to_os_string();
        partial.push(".partial.png");
        crate::text::write_through(&png, &png.with_file_name(partial), |partial| {
            figure
                .draw(BitMapBackend::new(partial, pixels).into_drawing_area())
                .map_err(std::io::Error::other)
        })
        .map_err(|e| at(&png, &e))?;
        written.push(png);
    }
    Ok(written)
}

/// How a chart places its x values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum XAxis<'a> {
    /// Numbers, at their values.
    Numbers,
    /// Numbers placed evenly at 0, 1, ... (they span orders of magnitude); the names of
    /// the positions.
    Evenly(&'a [String]),
    /// Names at 0, 1, ...: drawn as points with range bars, not lines, since nothing lies
    /// between two policies or two apps.
    Categories(&'a [String]),
}

/// A measure against a varied setting: per line the mean, with a band (points: a bar)
/// from the smallest to the largest run, and red marks where runs or tenants failed.
/// One panel, or small multiples: a grid of panels (one per app, say) that share the
/// legend, so that no panel holds more lines than the eye can tell apart.
pub struct LineChart<'a> {
    /// Title.
    pub title: &'a str,
    /// What the y values are: over which runs, what the bands show; one line or more.
    pub subtitle: &'a str,
    /// X axis label.
    pub x_label: &'a str,
    /// Y axis label, without its unit.
    pub y_label: &'a str,
    /// Unit of the y values.
    pub y_unit: &'a str,
    /// The panels: one untitled panel, or several, each titled.
    pub panels: &'a [Panel],
    /// How x values are placed.
    pub x_axis: XAxis<'a>,
}

impl Figure for LineChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), String> {
        draw_lines(root, self)
    }
}

/// One panel of a [`LineChart`]: its title (what its lines share) and its lines.
#[derive(Clone, Debug, PartialEq)]
pub struct Panel {
    /// Title; empty for the only panel of a chart.
    pub title: String,
    /// The lines.
    pub lines: Vec<Line>,
}

/// Most series one panel shows: past it, lines share colours the eye cannot tell apart
/// and the legend outgrows the figure, so a sweep draws small multiples.
pub const MAX_SERIES: usize = 8;

/// Pixels of one panel of small multiples, and the widest a figure gets.
const PANEL: (u32, u32) = (380, 280);
const MAX_WIDTH: u32 = 1800;

/// The size of a chart of `panels` panels: a single one at `single`; small multiples
/// in a grid of up to four columns with room for the legend, at most [`MAX_WIDTH`] wide.
pub fn chart_pixels(panels: usize, single: (u32, u32)) -> (u32, u32) {
    if panels <= 1 {
        return (single.0.min(MAX_WIDTH), single.1);
    }
    let (columns, rows) = grid(panels);
    let width = (columns as u32 * PANEL.0 + 300).min(MAX_WIDTH);
    (width, 110 + rows as u32 * PANEL.1)
}

/// Columns and rows of a grid of `panels` panels: up to four columns.
fn grid(panels: usize) -> (usize, usize) {
    let columns = panels.clamp(1, 4);
    (columns, panels.div_ceil(columns))
}

/// Ratio of the largest to the smallest positive mean beyond which a chart's y axis is
/// logarithmic: on a linear one the smaller series would lie flat on the x axis.
const LOG_SCALE_RATIO: f64 = 100.0;

/// Whether a chart of `lines` gets a logarithmic y axis: the positive means of its points
/// without failures differ by more than a factor of [`LOG_SCALE_RATIO`]. A failed point's
/// value says little (a tenant killed at its first allocation ends a run in milliseconds)
/// and must not squash the others.
pub fn log_scale(lines: &[Line]) -> bool {
    let (lo, hi) = lines
        .iter()
        .flat_map(|l| l.points.iter())
        .filter(|p| !p.run_failed && !p.tenant_failed)
        .filter_map(|p| p.value.map(|v| v.mean))
        .filter(|m| *m > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), m| {
            (lo.min(m), hi.max(m))
        });
    hi / lo > LOG_SCALE_RATIO
}

/// Palette slots by series name. The names of every series of a set of figures (those
/// against one setting), sorted, take the slots in turn: a series keeps its colour in
/// each figure of the set, also where others are missing (no evictions, failed runs), and
/// in every sweep with the same series; no two series of the set share a slot, as they
/// would often with a hash of the name into nine colours.
pub fn color_slots(names: impl IntoIterator<Item = String>) -> BTreeMap<String, usize> {
    let sorted: BTreeSet<String> = names.into_iter().collect();
    sorted
        .into_iter()
        .enumerate()
        .map(|(slot, name)| (name, slot))
        .collect()
}

/// What a legend row shows before its text.
enum Key {
    /// A line, a series of a line chart or a timeline.
    Line(RGBAColor),
    /// A point with a range bar, a series of a categorical chart.
    Point(RGBAColor),
    /// The mark of points where a tenant failed.
    TenantFailed,
    /// The mark of points where a run failed.
    RunFailed,
}

/// Red is kept for failures: no series gets it.
const FAILURE: RGBColor = RGBColor(214, 39, 40);

fn draw_lines<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    figure: &LineChart<'_>,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let body = header(&root, figure.title, figure.subtitle)?;
    let categorical = matches!(figure.x_axis, XAxis::Categories(_));
    // The panels share their series: a series' row once, in its colour.
    let mut legend: Vec<(Key, String)> = Vec::new();
    let lines = || figure.panels.iter().flat_map(|p| p.lines.iter());
    for l in lines().filter(|l| !l.label.is_empty()) {
        if legend.iter().any(|(_, text)| *text == l.label) {
            continue;
        }
        let color = line_color(l.color);
        let key = if categorical {
            Key::Point(color)
        } else {
            Key::Line(color)
        };
        legend.push((key, l.label.clone()));
    }
    let all = || lines().flat_map(|l| l.points.iter());
    if all().any(|p| p.tenant_failed) {
        legend.push((Key::TenantFailed, "a tenant failed".into()));
    }
    if all().any(|p| p.run_failed) {
        legend.push((Key::RunFailed, "a run failed".into()));
    }
    let (area, legend_area) = beside_legend(&body, &legend)?;
    match figure.panels {
        [panel] if panel.title.is_empty() => {
            draw_panel(&area, figure, &panel.lines, figure.y_label, AXIS_DESC_SIZE)?;
        }
        panels => {
            let (columns, rows) = grid(panels.len());
            for (cell, panel) in area.split_evenly((rows, columns)).iter().zip(panels) {
                let titled = cell.titled(&panel.title, ("sans-serif", 15)).map_err(e)?;
                draw_panel(&titled, figure, &panel.lines, "", 13)?;
            }
        }
    }
    if let Some(legend_area) = legend_area {
        draw_legend(&legend_area, &legend)?;
    }
    root.present().map_err(e)
}

/// Draws one panel of `figure`, its `lines`, on `area`: a logarithmic y axis when they
/// need one; `y_label` before the unit (the panels of small multiples give only the
/// unit, the subtitle says what), axis descriptions at `desc_size` points.
fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    figure: &LineChart<'_>,
    lines: &[Line],
    y_label: &str,
    desc_size: u32,
) -> Result<(), String> {
    let log = log_scale(lines);
    let unit = if log {
        format!("{}, log scale", figure.y_unit)
    } else {
        figure.y_unit.to_owned()
    };
    let y_desc = if y_label.is_empty() {
        unit
    } else {
        format!("{y_label} ({unit})")
    };
    let spreads = || {
        lines
            .iter()
            .flat_map(|l| l.points.iter())
            .filter_map(|p| p.value)
    };
    let top = spreads().map(|v| v.max).fold(0.0f64, f64::max);
    let style = PanelStyle {
        lines,
        y_desc: &y_desc,
        desc_size,
    };
    if log {
        let bottom = spreads()
            .flat_map(|v| [v.min, v.mean])
            .filter(|y| *y > 0.0)
            .fold(f64::INFINITY, f64::min);
        let y = bottom / 1.5..top * 1.5;
        plot_lines(area, figure, &style, y.clone(), y.log_scale())
    } else {
        let y = 0.0..if top > 0.0 { top * 1.08 } else { 1.0 };
        plot_lines(area, figure, &style, y.clone(), y)
    }
}

/// Points of an axis description on a figure of one panel (small multiples' are
/// smaller).
const AXIS_DESC_SIZE: u32 = 16;

/// What one panel draws besides the chart's shared settings.
struct PanelStyle<'a> {
    lines: &'a [Line],
    y_desc: &'a str,
    desc_size: u32,
}

/// Longest x label drawn whole; longer ones end in an ellipsis.
const MAX_LABEL_CHARS: usize = 24;

/// `label` cut to [`MAX_LABEL_CHARS`].
fn shortened(label: &str) -> String {
    if label.chars().count() <= MAX_LABEL_CHARS {
        label.to_owned()
    } else {
        let cut: String = label.chars().take(MAX_LABEL_CHARS - 1).collect();
        format!("{cut}\u{2026}")
    }
}

/// Draws the axes, lines or points and failure marks of a panel on `area`, with
/// `y_spec` (linear or logarithmic) spanning `y`. Names on the x axis that would run
/// into each other stand upright.
fn plot_lines<DB, Y>(
    area: &DrawingArea<DB, Shift>,
    figure: &LineChart<'_>,
    style: &PanelStyle<'_>,
    y: Range<f64>,
    y_spec: Y,
) -> Result<(), String>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let lines = style.lines;
    let x = x_range(figure.x_axis, lines);
    let names: Option<Vec<String>> = match figure.x_axis {
        XAxis::Numbers => None,
        XAxis::Evenly(names) | XAxis::Categories(names) => {
            Some(names.iter().map(|n| shortened(n)).collect())
        }
    };
    let upright = match &names {
        Some(names) => upright_height(area, names)?,
        None => None,
    };
    let mut chart = ChartBuilder::on(area)
        .margin(14)
        .x_label_area_size(upright.map_or(48, |w| w + 44))
        .y_label_area_size(70)
        .build_cartesian_2d(x, y_spec)
        .map_err(e)?;
    let format_x = |x: &f64| match &names {
        // Upright names are drawn below, hung from their ticks.
        _ if upright.is_some() => String::new(),
        Some(names) if (x.round() - x).abs() < 1e-9 && *x >= 0.0 => {
            names.get(x.round() as usize).cloned().unwrap_or_default()
        }
        Some(_) => String::new(),
        None => format!("{x}"),
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(figure.x_label)
        .y_desc(style.y_desc)
        .x_label_formatter(&format_x)
        .axis_desc_style(("sans-serif", style.desc_size))
        .label_style(LABEL_FONT);
    if style.desc_size < AXIS_DESC_SIZE {
        // A small panel: fewer grid lines, so that the data stands out.
        mesh.y_labels(6).y_max_light_lines(1);
    }
    if let Some(names) = &names {
        mesh.x_labels(names.len()).x_max_light_lines(0);
    }
    mesh.draw().map_err(e)?;
    if let (Some(names), Some(_)) = (&names, upright) {
        // Turned clockwise, each starts just under its tick and reads downwards.
        let turned = TextStyle::from(LABEL_FONT.into_font().transform(FontTransform::Rotate90))
            .pos(Pos::new(HPos::Left, VPos::Center));
        let (_, top) = area.get_base_pixel();
        for (i, name) in names.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64, y.start));
            let (left, _) = area.get_base_pixel();
            area.draw_text(name, &turned, (x - left, y - top + 8))
                .map_err(e)?;
        }
    }
    // Where a point without a value marks its failures: on the x axis. Values go no lower,
    // which only a zero on a logarithmic axis would.
    let floor = y.start;
    let shown = |v: f64| v.max(floor);
    let categorical = matches!(figure.x_axis, XAxis::Categories(_));
    // Points of different lines at one category sit side by side, not on each other.
    let dodge = if categorical {
        0.15f64.min(0.7 / lines.len().max(1) as f64)
    } else {
        0.0
    };
    let half = (lines.len().max(1) - 1) as f64 / 2.0;
    let mut marks = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let color = line_color(line.color);
        let shift = (i as f64 - half) * dodge;
        for segment in segments(line, categorical, shift) {
            if let [(x, v)] = segment[..] {
                let cap = dodge * 0.3;
                let bar = [
                    vec![(x, shown(v.min)), (x, shown(v.max))],
                    vec![(x - cap, shown(v.min)), (x + cap, shown(v.min))],
                    vec![(x - cap, shown(v.max)), (x + cap, shown(v.max))],
                ];
                chart
                    .draw_series(bar.map(|b| PathElement::new(b, color.stroke_width(2))))
                    .map_err(e)?;
                chart
                    .draw_series([Circle::new((x, shown(v.mean)), 4, color.filled())])
                    .map_err(e)?;
                continue;
            }
            let band: Vec<(f64, f64)> = segment
                .iter()
                .map(|(x, v)| (*x, shown(v.max)))
                .chain(segment.iter().rev().map(|(x, v)| (*x, shown(v.min))))
                .collect();
            chart
                .draw_series([Polygon::new(band, color.mix(0.18).filled())])
                .map_err(e)?;
            chart
                .draw_series(LineSeries::new(
                    segment.iter().map(|(x, v)| (*x, shown(v.mean))),
                    color.stroke_width(2),
                ))
                .map_err(e)?;
        }
        for p in line
            .points
            .iter()
            .filter(|p| p.run_failed || p.tenant_failed)
        {
            marks.push((
                p.x + shift,
                p.value.map_or(floor, |v| shown(v.mean)),
                color,
                *p,
            ));
        }
    }
    // Marks go over every line, so no series hides another's failure.
    draw_failure_marks(&mut chart, &marks)
}

/// Draws the failure marks of `marks` (x, height, the line's colour, the point): a cross
/// where tenants failed, a ring where runs failed, each over a dot in the line's colour
/// that says whose it is where the mark sits on the x axis.
fn draw_failure_marks<DB, CT>(
    chart: &mut ChartContext<'_, DB, CT>,
    marks: &[(f64, f64, RGBAColor, LinePoint)],
) -> Result<(), String>
where
    DB: DrawingBackend,
    CT: CoordTranslate<From = (f64, f64)>,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    for &(x, at, color, p) in marks {
        chart
            .draw_series([Circle::new((x, at), 3, color.filled())])
            .map_err(e)?;
        if p.tenant_failed {
            chart
                .draw_series([Cross::new((x, at), 6, FAILURE.stroke_width(2))])
                .map_err(e)?;
        }
        if p.run_failed {
            chart
                .draw_series([Circle::new((x, at), 8, FAILURE.stroke_width(2))])
                .map_err(e)?;
        }
    }
    Ok(())
}

/// The font of the names and numbers on the axes.
const LABEL_FONT: (&str, u32) = ("sans-serif", 13);

/// The x axis's span: the categories side by side, or the points' x values with a
/// margin (0 to 1 when there are none).
fn x_range(axis: XAxis<'_>, lines: &[Line]) -> Range<f64> {
    let xs = || lines.iter().flat_map(|l| l.points.iter().map(|p| p.x));
    match axis {
        XAxis::Categories(names) => -0.5..names.len().max(1) as f64 - 0.5,
        XAxis::Numbers | XAxis::Evenly(_) => {
            let x0 = xs().fold(f64::INFINITY, f64::min);
            let x1 = xs().fold(f64::NEG_INFINITY, f64::max);
            let (x0, x1) = if x0.is_finite() { (x0, x1) } else { (0.0, 1.0) };
            let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
            let pad = (x1 - x0) * 0.03;
            x0 - pad..x1 + pad
        }
    }
}

/// The height the x axis's `names` take standing upright, or `None` when they lie
/// flat: they stand when the widest would not fit its share of the axis.
fn upright_height<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    names: &[String],
) -> Result<Option<u32>, String> {
    let mut widest = 0;
    for name in names {
        let (w, _) = area
            .estimate_text_size(name, &LABEL_FONT.into_text_style(area))
            .map_err(|e| e.to_string())?;
        widest = widest.max(w);
    }
    let share = (area.dim_in_pixel().0.saturating_sub(100)) / names.len().max(1) as u32;
    Ok((widest + 8 > share).then(|| widest.min(area.dim_in_pixel().1 / 3)))
}

/// The pieces a line is drawn in: runs of points joined by the line, each point at its x
/// plus `shift` with its value. A line joins only points whose runs all went well: it
/// breaks where a point has no value rather than bridge the gap, and a point where runs
/// or tenants failed stands alone, with its mark, rather than pass for a value of the
/// series. On a `categorical` axis every point stands alone.
fn segments(line: &Line, categorical: bool, shift: f64) -> Vec<Vec<(f64, Spread)>> {
    let mut segments: Vec<Vec<(f64, Spread)>> = Vec::new();
    let mut joins_previous = false;
    for p in &line.points {
        let Some(v) = p.value else {
            joins_previous = false;
            continue;
        };
        let joins = !categorical && !p.run_failed && !p.tenant_failed;
        match segments.last_mut() {
            Some(segment) if joins && joins_previous => segment.push((p.x + shift, v)),
            _ => segments.push(vec![(p.x + shift, v)]),
        }
        joins_previous = joins;
    }
    segments
}

/// Each tenant's VRAM over time as steps (x in seconds, y in MiB), the VRAM the
/// tenants may hold as a dashed line, and a red cross where a tenant failed.
pub struct Timeline {
    /// Title.
    pub title: String,
    /// One timeline per tenant.
    pub series: Vec<TimelineSeries>,
    /// Where the x axis ends: the last value holds until then.
    pub end_ns: u64,
    /// The VRAM the tenants may hold together.
    pub limit_bytes: u64,
}

/// One tenant's line of a [`Timeline`].
pub struct TimelineSeries {
    /// The tenant.
    pub name: String,
    /// [time_ns, bytes] at every change, as the report's timelines hold them.
    pub points: Vec<(u64, u64)>,
    /// When it failed (out of memory, refused), and the VRAM it held just before.
    pub failed_at: Option<(u64, u64)>,
}

/// Most times the largest VRAM held the limit may be and still be drawn: a limit far
/// above what anybody held would flatten the lines against the x axis.
const LIMIT_SHOWN_RATIO: u64 = 4;

impl Timeline {
    /// The timeline figure of a run's report. A failed tenant frees its VRAM when it
    /// fails: its last change is the failure, marked at the VRAM it held before.
    pub fn of(report: &gpuswap_sim::report::Report) -> Self {
        let series = report
            .tenants
            .iter()
            .map(|t| TimelineSeries {
                name: t.name.clone(),
                points: t.vram_timeline.clone(),
                failed_at: t.error.as_ref().map(|_| match t.vram_timeline.as_slice() {
                    [.., (_, before), (at, _)] => (*at, *before),
                    [(at, bytes)] => (*at, *bytes),
                    [] => (0, 0),
                }),
            })
            .collect();
        Self {
            title: format!(
                "VRAM held per tenant: {} ({})",
                report.scenario, report.manager
            ),
            series,
            end_ns: report.system.makespan_ns,
            limit_bytes: report.settings.vram_bytes,
        }
    }

    /// Whether the limit is drawn: it is not far above what the tenants held.
    fn limit_shown(&self) -> bool {
        let peak = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .max()
            .unwrap_or(0);
        self.limit_bytes <= peak.saturating_mul(LIMIT_SHOWN_RATIO)
    }

    /// The subtitle: what the dashed line and the crosses are.
    fn subtitle(&self) -> String {
        let limit = gpuswap_sim::units::format_bytes(self.limit_bytes);
        let mut text = if self.limit_shown() {
            format!("Dashed: the VRAM the tenants may hold ({limit})")
        } else {
            format!("The VRAM the tenants may hold ({limit}) is off the scale")
        };
        let failed = self.series.iter().filter(|s| s.failed_at.is_some()).count();
        if failed > 0 {
            text += &format!(
                "; red cross: a tenant failed ({failed} of {})",
                self.series.len()
            );
        }
        text
    }
}

impl Figure for Timeline {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), String> {
        draw_timeline(root, self)
    }
}

fn draw_timeline<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    figure: &Timeline,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let body = header(&root, &figure.title, &figure.subtitle())?;
    let series = &figure.series;
    let mut legend: Vec<(Key, String)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (Key::Line(line_color(i)), s.name.clone()))
        .collect();
    if series.iter().any(|s| s.failed_at.is_some()) {
        legend.push((Key::TenantFailed, "a tenant failed".into()));
    }
    let (area, legend_area) = beside_legend(&body, &legend)?;
    const MIB: f64 = 1048576.0;
    let end_ns = figure.end_ns;
    let x1 = (end_ns as f64 / 1e9).max(1e-9);
    let limit = figure
        .limit_shown()
        .then_some(figure.limit_bytes as f64 / MIB);
    let y1 = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1 as f64 / MIB))
        .chain(limit)
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(&area)
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
    if let Some(limit) = limit {
        // Dashes: ten steps across, each drawn for half its width.
        let dashes = (0..40).map(|i| {
            let x = x1 * f64::from(i) / 40.0;
            PathElement::new(
                vec![(x, limit), (x + x1 / 80.0, limit)],
                BLACK.stroke_width(1),
            )
        });
        chart.draw_series(dashes).map_err(e)?;
    }
    for (i, s) in series.iter().enumerate() {
        // Steps: each value holds until the next change; the last until the end.
        let points = &s.points;
        let mut steps = Vec::with_capacity(points.len() * 2 + 1);
        for (j, (t, bytes)) in points.iter().enumerate() {
            let y = *bytes as f64 / MIB;
            steps.push((*t as f64 / 1e9, y));
            let next = points.get(j + 1).map_or(end_ns, |n| n.0);
            steps.push((next as f64 / 1e9, y));
        }
        chart
            .draw_series(LineSeries::new(steps, line_color(i).stroke_width(2)))
            .map_err(e)?;
    }
    for (at, bytes) in series.iter().filter_map(|s| s.failed_at) {
        chart
            .draw_series([Cross::new(
                (at as f64 / 1e9, bytes as f64 / MIB),
                7,
                FAILURE.stroke_width(3),
            )])
            .map_err(e)?;
    }
    if let Some(legend_area) = legend_area {
        draw_legend(&legend_area, &legend)?;
    }
    root.present().map_err(e)
}

/// Draws the title and, below it, the subtitle's lines; returns the area under them.
fn header<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    subtitle: &str,
) -> Result<DrawingArea<DB, Shift>, String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut body = root
        .margin(6, 0, 0, 0)
        .titled(title, ("sans-serif", 21))
        .map_err(e)?;
    for line in subtitle.lines() {
        body = body
            .titled(line, ("sans-serif", 14).into_font().color(&SUBTITLE))
            .map_err(e)?;
    }
    Ok(body)
}

/// Subtitles in dark grey, below the title in rank.
const SUBTITLE: RGBColor = RGBColor(80, 80, 80);

/// Legend rows: their height and where the first starts, level with the plot's top.
const LEGEND_ROW: i32 = 22;
const LEGEND_TOP: i32 = 24;
/// Width of a legend row's key and the gap before its text.
const LEGEND_KEY: i32 = 34;

/// The plot's area and the legend's, when it has one.
type PlotAndLegend<DB> = (DrawingArea<DB, Shift>, Option<DrawingArea<DB, Shift>>);

/// Splits `area` into the plot and, when there are rows, a column on its right for the
/// legend, wide enough for its longest text (up to 40% of the width): a legend inside
/// the plot covers data.
fn beside_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[(Key, String)],
) -> Result<PlotAndLegend<DB>, String> {
    if rows.is_empty() {
        return Ok((area.clone(), None));
    }
    let style = legend_style();
    let mut widest = 0;
    for (_, text) in rows {
        let (w, _) = area
            .estimate_text_size(text, &style)
            .map_err(|e| e.to_string())?;
        widest = widest.max(w as i32);
    }
    let width = area.dim_in_pixel().0 as i32;
    let legend = (widest + LEGEND_KEY + 20).min(width * 2 / 5);
    let (plot, legend_area) = area.split_horizontally(width - legend);
    Ok((plot, Some(legend_area)))
}

fn legend_style() -> TextStyle<'static> {
    TextStyle::from(("sans-serif", 13)).pos(Pos::new(HPos::Left, VPos::Center))
}

/// Draws legend rows down `area`.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[(Key, String)],
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let style = legend_style();
    for (i, (key, text)) in rows.iter().enumerate() {
        let y = LEGEND_TOP + i as i32 * LEGEND_ROW;
        let mid = (LEGEND_KEY - 10) / 2;
        match key {
            Key::Line(color) => area.draw(&PathElement::new(
                vec![(0, y), (LEGEND_KEY - 10, y)],
                color.stroke_width(2),
            )),
            Key::Point(color) => area
                .draw(&PathElement::new(
                    vec![(mid, y - 7), (mid, y + 7)],
                    color.stroke_width(2),
                ))
                .and_then(|()| area.draw(&Circle::new((mid, y), 4, color.filled()))),
            Key::TenantFailed => area.draw(&Cross::new((mid, y), 6, FAILURE.stroke_width(2))),
            Key::RunFailed => area.draw(&Circle::new((mid, y), 8, FAILURE.stroke_width(2))),
        }
        .map_err(e)?;
        area.draw_text(text, &style, (LEGEND_KEY, y)).map_err(e)?;
    }
    Ok(())
}

/// Series colours: Tableau's qualitative palette (matplotlib's default cycle) without its
/// red, which marks failures, then plotters' larger palette. Palette99's first ones
/// include near-identical shades, so eight lines in one figure (one per app) were hard
/// to tell apart.
fn line_color(slot: usize) -> RGBAColor {
    const TABLEAU: [(u8, u8, u8); 9] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    match TABLEAU.get(slot) {
        Some(&(r, g, b)) => RGBColor(r, g, b).to_rgba(),
        None => Palette99::pick(slot).to_rgba(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(means: &[f64]) -> Line {
        Line {
            label: String::new(),
            color: 0,
            points: means
                .iter()
                .enumerate()
                .map(|(i, &mean)| LinePoint {
                    x: i as f64,
                    value: Some(Spread {
                        mean,
                        min: mean,
                        max: mean,
                    }),
                    run_failed: false,
                    tenant_failed: false,
                })
                .collect(),
        }
    }

    #[test]
    fn the_y_axis_is_logarithmic_when_means_differ_by_orders_of_magnitude() {
        assert!(!log_scale(&[line(&[1.0, 50.0, 100.0])]));
        assert!(log_scale(&[line(&[1.0, 50.0]), line(&[101.0])]));
        // Zeros and points without a value do not count: a log axis cannot show zero.
        let mut sparse = line(&[0.0, 2.0, 150.0]);
        assert!(!log_scale(std::slice::from_ref(&sparse)));
        sparse.points[2].value = None;
        let mut failed = sparse.clone();
        failed.points[0].value = Some(Spread {
            mean: 0.01,
            min: 0.01,
            max: 0.01,
        });
        failed.points[0].tenant_failed = true;
        assert!(!log_scale(&[failed]));
        sparse.points.push(LinePoint {
            x: 3.0,
            value: Some(Spread {
                mean: 201.0,
                min: 0.5,
                max: 300.0,
            }),
            run_failed: false,
            tenant_failed: false,
        });
        assert!(log_scale(&[sparse]));
        assert!(!log_scale(&[]));
    }

    #[test]
    fn lines_join_only_points_without_failures_and_categories_stand_alone() {
        let mut l = line(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        l.points[2].value = None;
        l.points[4].tenant_failed = true;
        let xs = |segments: Vec<Vec<(f64, Spread)>>| -> Vec<Vec<f64>> {
            segments
                .iter()
                .map(|s| s.iter().map(|(x, _)| *x).collect())
                .collect()
        };
        assert_eq!(
            xs(segments(&l, false, 0.0)),
            [vec![0.0, 1.0], vec![3.0], vec![4.0], vec![5.0]]
        );
        // A failed point stands alone even where its neighbours have values.
        l.points[4].tenant_failed = false;
        l.points[3].run_failed = true;
        assert_eq!(
            xs(segments(&l, false, 0.0)),
            [vec![0.0, 1.0], vec![3.0], vec![4.0, 5.0]]
        );
        assert_eq!(
            xs(segments(&l, true, 0.25)),
            [vec![0.25], vec![1.25], vec![3.25], vec![4.25], vec![5.25]]
        );
    }

    #[test]
    fn color_slots_follow_the_sorted_names() {
        let slots = color_slots(["nn", "bfs", "lud", "bfs"].map(String::from));
        assert_eq!(slots.len(), 3);
        assert_eq!((slots["bfs"], slots["lud"], slots["nn"]), (0, 1, 2));
    }

    fn svg_of(figure: &impl Figure, pixels: (u32, u32)) -> String {
        register_font();
        let mut svg = String::new();
        figure
            .draw(SVGBackend::with_string(&mut svg, pixels).into_drawing_area())
            .unwrap();
        svg
    }

    #[test]
    fn small_multiples_title_each_panel_and_share_one_legend() {
        let panels: Vec<Panel> = ["app=bfs", "app=nn", "app=lud"]
            .iter()
            .map(|title| Panel {
                title: (*title).to_owned(),
                lines: ["first", "second"]
                    .iter()
                    .enumerate()
                    .map(|(i, label)| Line {
                        label: (*label).to_owned(),
                        color: i,
                        ..line(&[1.0, 2.0])
                    })
                    .collect(),
            })
            .collect();
        let names: Vec<String> = (0..6).map(|i| format!("delayed-adaptive-{i}")).collect();
        let chart = LineChart {
            title: "t",
            subtitle: "s",
            x_label: "x",
            y_label: "y",
            y_unit: "s",
            panels: &panels,
            x_axis: XAxis::Categories(&names),
        };
        let pixels = chart_pixels(panels.len(), (1000, 600));
        let svg = svg_of(&chart, pixels);
        for title in ["app=bfs", "app=nn", "app=lud"] {
            assert_eq!(
                svg.matches(&format!("\n{title}\n</text>")).count(),
                1,
                "{title}"
            );
        }
        assert_eq!(
            svg.matches("\nfirst\n</text>").count(),
            1,
            "one legend row per series"
        );
        // Names too wide for their share of a panel stand upright.
        assert!(svg.contains("rotate(90"), "upright names");
    }

    /// A run in which the second tenant finds too little of 60 MiB left: the timeline
    /// draws the limit and a cross where it failed, and says so.
    #[test]
    fn a_timeline_shows_the_vram_limit_and_where_tenants_failed() {
        let text = "seed = 5\n[device]\npreset = \"gtx480\"\nvram_limit = \"60MiB\"\n\
             [manager]\nmode = \"native\"\n\
             [[tenant]]\nname = \"a\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n\
             [[tenant]]\nname = \"b\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n";
        let s = crate::scenario::parse(Path::new("two-nn.toml"), text).unwrap();
        let report = gpuswap_sim::report::run_and_report(&s.name, s.seed, &s.config).unwrap();
        let figure = Timeline::of(&report);
        assert_eq!(figure.limit_bytes, 60 << 20);
        assert!(figure.limit_shown());
        let failed: Vec<Option<(u64, u64)>> = figure.series.iter().map(|s| s.failed_at).collect();
        assert_eq!(failed, [None, Some((0, 0))]);
        assert!(report.tenants[1].error.is_some());
        let subtitle = figure.subtitle();
        assert_eq!(
            subtitle,
            "Dashed: the VRAM the tenants may hold (60.0 MiB); red cross: a tenant failed (1 of 2)"
        );
        let svg = svg_of(&figure, (900, 520));
        assert!(svg.contains(&subtitle));
        assert!(svg.contains("\na tenant failed\n</text>"));
        // A limit far above what anybody held is left off the scale, and said to be.
        let ample = Timeline {
            limit_bytes: 1 << 40,
            ..figure
        };
        assert!(!ample.limit_shown());
        assert!(
            ample
                .subtitle()
                .starts_with("The VRAM the tenants may hold (1024.0 GiB) is off the scale")
        );
    }
}
