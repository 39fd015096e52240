//! `gpuswap profile`: runs the access profiler ([`gpuswap_sim::profile`]) on one app and
//! writes what it found into a directory: `units.csv` (the counters per unit),
//! `profile.svg` (and `profile.png`), the access profile drawn as in the dissertation, and
//! `priorities.toml`, the priorities file scenarios read with `priorities_file`.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use gpuswap_core::DEFAULT_CHUNK_BYTES;
use gpuswap_sim::profile::{Granularity, PAGE_BYTES, Profile, profile};
use gpuswap_sim::units::{format_bytes, format_ns, parse_bytes};
use gpuswap_sim::{apps, preset, runtime};
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use thiserror::Error;

use crate::priorities::PrioritiesFile;
use crate::scenario::DEFAULT_PRESET;

/// The arguments of `gpuswap profile`.
#[derive(Args)]
#[command(after_help = "Examples:\n  \
    gpuswap profile backprop --granularity chunk --out profiles/backprop\n  \
    gpuswap profile hotspot --size 1024 --png")]
pub struct ProfileArgs {
    /// The app to profile (`gpuswap apps` lists them).
    app: String,
    /// The app's input size (`default`, `rodinia` or a number; see the app's help).
    #[arg(long, default_value = "default")]
    size: String,
    /// What one repetition of a kernel relocates to host memory.
    #[arg(long, value_enum, default_value_t = GranularityArg::Chunk)]
    granularity: GranularityArg,
    /// Chunk size of chunk granularity and of the chunk priorities; use the scenario's
    /// `manager.chunk_size` [default: 4MiB, the manager's default].
    #[arg(long)]
    chunk_size: Option<String>,
    /// The device preset (`gpuswap presets` lists them).
    #[arg(long, default_value = DEFAULT_PRESET)]
    preset: String,
    /// Directory to write into [default: profile-APP].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write the plot as `profile.png`.
    #[arg(long)]
    png: bool,
}

/// The granularity flag's values.
#[derive(Clone, Copy, ValueEnum)]
enum GranularityArg {
    /// 4 KiB pages, the dissertation's profiles.
    Page,
    /// Chunks of `--chunk-size`.
    Chunk,
    /// Whole buffers.
    Buffer,
}

impl From<GranularityArg> for Granularity {
    fn from(arg: GranularityArg) -> Self {
        match arg {
            GranularityArg::Page => Granularity::Page,
            GranularityArg::Chunk => Granularity::Chunk,
            GranularityArg::Buffer => Granularity::Buffer,
        }
    }
}

/// Why `gpuswap profile` stopped.
#[derive(Debug, Error)]
pub enum ProfileError {
    /// An argument that names no app, preset or size; the message names the flag.
    #[error("{0}")]
    BadInput(String),
    /// A file could not be written.
    #[error("{0}")]
    Output(String),
}

/// Smallest chunk size accepted: one small page, as for `manager.chunk_size`.
const MIN_CHUNK_BYTES: u64 = PAGE_BYTES;
/// Rows of the priorities table printed in full; longer tables show both ends.
const TABLE_ROWS: usize = 20;

/// Profiles the app, writes the output files and prints a summary.
pub fn run(args: &ProfileArgs) -> Result<(), ProfileError> {
    let bad = ProfileError::BadInput;
    let app = apps::find(&args.app).ok_or_else(|| {
        let known: Vec<_> = apps::all().iter().map(|a| a.name()).collect();
        bad(format!(
            "APP: unknown app {:?}; expected one of: {}",
            args.app,
            known.join(", ")
        ))
    })?;
    let preset = preset::find(&args.preset).ok_or_else(|| {
        let known: Vec<_> = preset::all().iter().map(|p| p.name).collect();
        bad(format!(
            "--preset: unknown preset {:?}; expected one of: {}",
            args.preset,
            known.join(", ")
        ))
    })?;
    let chunk_bytes = match &args.chunk_size {
        None => DEFAULT_CHUNK_BYTES,
        Some(text) => match parse_bytes(text) {
            Err(e) => return Err(bad(format!("--chunk-size: {e}"))),
            Ok(bytes) if bytes < MIN_CHUNK_BYTES => {
                return Err(bad(format!(
                    "--chunk-size: {text:?} is too small; expected at least 4KiB (one small page)"
                )));
            }
            Ok(bytes) => bytes,
        },
    };
    // One phase iteration is the profile (the setup and teardown launches count too).
    let program = app
        .program(&args.size, 1, preset.shape())
        .map_err(|e| bad(format!("--size: {e}")))?;
    let program = runtime::with_runtime(&program, &preset);
    let granularity = Granularity::from(args.granularity);
    let profile = profile(&program, &preset, granularity, chunk_bytes);

    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("profile-{}", app.name())));
    std::fs::create_dir_all(&out)
        .map_err(|e| ProfileError::Output(format!("{}: cannot create: {e}", out.display())))?;
    let csv_path = out.join("units.csv");
    write_csv(&csv_path, &profile)?;
    let title = format!(
        "access profile: {} ({}), {} granularity",
        app.name(),
        args.size,
        granularity.name()
    );
    let axis = unit_name(granularity, chunk_bytes);
    let figure = ProfileFigure {
        profile: &profile,
        title: &title,
        unit: &axis,
    };
    let mut written = vec![csv_path];
    written.extend(
        crate::plot::save(&out.join("profile"), PLOT_PIXELS, args.png, &figure)
            .map_err(ProfileError::Output)?,
    );
    let priorities_path = out.join("priorities.toml");
    let file = PrioritiesFile {
        app: Some(app.name().to_owned()),
        size: Some(args.size.clone()),
        granularity: Some(granularity.name().to_owned()),
        priorities: profile.priorities.clone(),
        chunk_priorities: profile.chunk_priorities.clone(),
    };
    crate::text::write_atomically(&priorities_path, file.to_toml()).map_err(|e| {
        ProfileError::Output(format!("{}: cannot write: {e}", priorities_path.display()))
    })?;
    written.push(priorities_path);

    crate::stdout::write(&summary(
        &profile,
        &title,
        preset.name,
        chunk_bytes,
        &written,
    ))
    .map_err(ProfileError::Output)
}

/// What one unit is, for the y axis of the plot.
fn unit_name(granularity: Granularity, chunk_bytes: u64) -> String {
    match granularity {
        Granularity::Page => format!("{} page", exact_size(PAGE_BYTES)),
        Granularity::Chunk => format!("{} chunk", exact_size(chunk_bytes)),
        Granularity::Buffer => "buffer".into(),
    }
}

/// A size in the largest binary unit that holds it exactly (`4MiB`, `1536KiB`), which
/// `manager.chunk_size` and `--chunk-size` read back unchanged.
fn exact_size(bytes: u64) -> String {
    [("GiB", 30), ("MiB", 20), ("KiB", 10)]
        .into_iter()
        .find(|(_, shift)| bytes > 0 && bytes.trailing_zeros() >= *shift)
        .map_or_else(
            || format!("{bytes}B"),
            |(unit, shift)| format!("{}{unit}", bytes >> shift),
        )
}

/// A count as people read it: at most three decimals, none when whole (the simulator's
/// counts are expected values and can be fractional).
fn format_count(count: f64) -> String {
    ((count * 1000.0).round() / 1000.0).to_string()
}

/// A tick label: thousands as `k`, millions as `M` (`250k`, `2.5M`).
fn compact_count(count: f64) -> String {
    match count {
        c if c >= 1e6 => format!("{}M", format_count(c / 1e6)),
        c if c >= 1e3 => format!("{}k", format_count(c / 1e3)),
        c => format_count(c),
    }
}

fn write_csv(path: &Path, profile: &Profile) -> Result<(), ProfileError> {
    let fail = |e: &dyn std::fmt::Display| ProfileError::Output(format!("{}: {e}", path.display()));
    // Whole or not at all: a full disk leaves no truncated units.csv.
    let mut csv = csv::Writer::from_writer(Vec::new());
    csv.write_record(["buffer", "offset_bytes", "bytes", "reads", "writes"])
        .map_err(|e| fail(&e))?;
    for unit in &profile.units {
        csv.write_record([
            unit.label.clone(),
            unit.offset_bytes.to_string(),
            unit.bytes.to_string(),
            format_count(unit.reads),
            format_count(unit.writes),
        ])
        .map_err(|e| fail(&e))?;
    }
    let bytes = csv.into_inner().map_err(|e| fail(&e))?;
    crate::text::write_atomically(path, bytes).map_err(|e| fail(&e))
}

/// The summary printed after profiling: what was profiled, its simulated cost, the buffer
/// priorities (highest first) and the files written.
fn summary(
    profile: &Profile,
    title: &str,
    preset: &str,
    chunk_bytes: u64,
    written: &[PathBuf],
) -> String {
    let mut out = format!("{title} on {preset}\n");
    out += &format!(
        "{} units of {} buffers, {} launches, {} kernel repetitions\n",
        profile.units.len(),
        profile.buffers.len(),
        profile.launches,
        profile.repetitions
    );
    out += &format!(
        "simulated profiling time {} (a normal run of the launches takes {}): slowdown {:.0}x\n\n",
        format_ns(profile.profiling_ns),
        format_ns(profile.normal_ns),
        profile.slowdown
    );

    let mut by_priority: Vec<_> = profile.buffers.iter().collect();
    by_priority.sort_by_key(|b| std::cmp::Reverse(b.priority));
    let shown: Vec<_> = if by_priority.len() <= TABLE_ROWS {
        by_priority.iter().map(Some).collect()
    } else {
        // Both ends matter: what stays in VRAM longest and what is evicted first.
        let half = TABLE_ROWS / 2;
        let top = by_priority[..half].iter().map(Some);
        let bottom = by_priority[by_priority.len() - half..].iter().map(Some);
        top.chain([None]).chain(bottom).collect()
    };
    let label_width = profile
        .buffers
        .iter()
        .map(|b| b.label.len())
        .max()
        .unwrap_or(0)
        .max("buffer".len());
    out += &format!(
        "{:<label_width$}  {:>10}  {:>14}  {:>14}  {:>13}  {:>8}\n",
        "buffer", "size", "reads", "writes", "accesses/page", "priority"
    );
    for row in shown {
        match row {
            Some(b) => {
                out += &format!(
                    "{:<label_width$}  {:>10}  {:>14}  {:>14}  {:>13.3}  {:>8}\n",
                    b.label,
                    format_bytes(b.bytes),
                    format_count(b.reads),
                    format_count(b.writes),
                    b.accesses_per_page,
                    b.priority
                )
            }
            None => {
                out += &format!(
                    "... {} more buffers (all in priorities.toml)\n",
                    profile.buffers.len() - TABLE_ROWS
                )
            }
        }
    }
    if !profile.chunk_priorities.is_empty() {
        out += &format!(
            "\nchunk priorities are for chunks of {0}: use manager.chunk_size = \"{0}\"\n",
            exact_size(chunk_bytes)
        );
    }
    out += "\n";
    for path in written {
        out += &format!("wrote {}\n", path.display());
    }
    out
}

/// Size of the plot in pixels.
const PLOT_PIXELS: (u32, u32) = (1400, 650);
/// Bytes per MiB, the plot's address unit.
const MIB: f64 = (1u64 << 20) as f64;
/// Share of the plotting area's height above the highest bar: two rows of labels (about
/// 45 of the plotting area's 530 px).
const LABEL_ROOM: f64 = 45.0 / 530.0;
/// Narrowest buffer, in pixels, whose boundaries the plot marks.
const MIN_MARKED_PX: f64 = 6.0;
/// Colours of reads and writes (matplotlib's blue and orange).
const READS: RGBColor = RGBColor(31, 119, 180);
const WRITES: RGBColor = RGBColor(255, 127, 14);

/// A run of adjacent units of one buffer with equal counts: one bar of the plot. Pages
/// of a buffer often look alike, so runs keep a page-granularity plot small.
struct Bar {
    from_mib: f64,
    to_mib: f64,
    reads: f64,
    writes: f64,
}

/// The access profile: the buffers laid out one after another in allocation order on
/// the x axis, reads per unit above zero, writes per unit below.
struct ProfileFigure<'a> {
    profile: &'a Profile,
    title: &'a str,
    unit: &'a str,
}

impl crate::plot::Figure for ProfileFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), String> {
        plot(root, self.profile, self.title, self.unit)
    }
}

fn plot<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    profile: &Profile,
    title: &str,
    unit: &str,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();

    // Each buffer's start address, and the bars: units tile the buffers in order, so a
    // unit's address is the sum of the units before it.
    let mut starts: Vec<(f64, &str)> = Vec::new();
    let mut base_bytes = 0;
    for buffer in &profile.buffers {
        starts.push((base_bytes as f64 / MIB, &buffer.label));
        base_bytes += buffer.bytes;
    }
    let total_mib = (base_bytes as f64 / MIB).max(f64::MIN_POSITIVE);
    let mut bars: Vec<Bar> = Vec::new();
    let mut address_bytes = 0;
    for u in &profile.units {
        let from_mib = address_bytes as f64 / MIB;
        address_bytes += u.bytes;
        let to_mib = address_bytes as f64 / MIB;
        match bars.last_mut() {
            // Offset 0 starts a new buffer, which gets its own bar.
            Some(last)
                if last.reads == u.reads && last.writes == u.writes && u.offset_bytes > 0 =>
            {
                last.to_mib = to_mib;
            }
            _ => bars.push(Bar {
                from_mib,
                to_mib,
                reads: u.reads,
                writes: u.writes,
            }),
        }
    }
    let max_reads = bars.iter().map(|b| b.reads).fold(0.0, f64::max);
    let max_writes = bars.iter().map(|b| b.writes).fold(0.0, f64::max);
    // A side without accesses still gets a sliver so that zero stays visible; above the
    // highest bar stays LABEL_ROOM of the plot's height for two rows of buffer labels:
    // top - highest = LABEL_ROOM * (top - bottom).
    let highest = max_reads.max(max_writes * 0.05).max(1.0);
    let bottom = -max_writes.max(max_reads * 0.05).max(1.0) * 1.05;
    let top = (highest - LABEL_ROOM * bottom) / (1.0 - LABEL_ROOM);

    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..total_mib, bottom..top)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("address space (MiB, buffers in allocation order)")
        .y_desc(format!("accesses per {unit} (reads up, writes down)"))
        .y_label_formatter(&|y| compact_count(y.abs()))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08))
        .draw()
        .map_err(e)?;

    // Buffer boundaries under the bars, labels over them. A boundary between two buffers
    // that are both narrower than a few pixels is left out: hundreds of small buffers
    // (heartwall) would otherwise grey the plot.
    let boundary = BLACK.mix(0.35);
    let mib_per_px = total_mib / f64::from(chart.plotting_area().dim_in_pixel().0);
    let wide = |i: usize| {
        let to_mib = starts.get(i + 1).map_or(total_mib, |s| s.0);
        (to_mib - starts[i].0) / mib_per_px >= MIN_MARKED_PX
    };
    for (i, &(from_mib, _)) in starts.iter().enumerate() {
        if wide(i) || (i > 0 && wide(i - 1)) {
            chart
                .draw_series(LineSeries::new(
                    [(from_mib, bottom), (from_mib, top)],
                    boundary,
                ))
                .map_err(e)?;
        }
    }

    chart
        .draw_series(
            bars.iter()
                .filter(|b| b.reads > 0.0)
                .map(|b| Rectangle::new([(b.from_mib, 0.0), (b.to_mib, b.reads)], READS.filled())),
        )
        .map_err(e)?;
    chart
        .draw_series(
            bars.iter().filter(|b| b.writes > 0.0).map(|b| {
                Rectangle::new([(b.from_mib, 0.0), (b.to_mib, -b.writes)], WRITES.filled())
            }),
        )
        .map_err(e)?;
    chart
        .draw_series(LineSeries::new([(0.0, 0.0), (total_mib, 0.0)], BLACK))
        .map_err(e)?;
    draw_labels(&chart, &starts, total_mib, (bottom, top)).map_err(e)?;
    // The legend sits below the plotting area, right of the axis description, where no
    // bar can be under it.
    let (width_px, height_px) = root.dim_in_pixel();
    let (width_px, height_px) = (width_px as i32, height_px as i32);
    for (i, (name, colour)) in [("reads", READS), ("writes", WRITES)]
        .into_iter()
        .enumerate()
    {
        let x = width_px - 180 + 90 * i as i32;
        let y = height_px - 30;
        root.draw(&Rectangle::new(
            [(x, y - 6), (x + 14, y + 6)],
            colour.filled(),
        ))
        .map_err(e)?;
        root.draw(&Text::new(
            name,
            (x + 20, y - 8),
            ("sans-serif", 15).into_font(),
        ))
        .map_err(e)?;
    }
    root.present().map_err(e)
}

/// Labels each buffer at the top of the plot, on a light background so that bars do not
/// hide it: across the buffer where it fits (on one of two alternating rows, so that
/// neighbours do not touch), downwards where only a line of text fits, not at all where
/// that does not fit either (the CSV names every buffer).
fn draw_labels<DB: DrawingBackend>(
    chart: &ChartContext<DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    starts: &[(f64, &str)],
    total_mib: f64,
    (bottom, top): (f64, f64),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    const PAD_PX: f64 = 3.0;
    let area = chart.plotting_area();
    let (width_px, height_px) = area.dim_in_pixel();
    // Data units per pixel on each axis.
    let x_px = total_mib / f64::from(width_px);
    let y_px = (top - bottom) / f64::from(height_px);
    let style = TextStyle::from(("sans-serif", 13).into_font()).color(&BLACK);
    let background = WHITE.mix(0.8).filled();
    let mut across = 0;
    for (i, &(from_mib, label)) in starts.iter().enumerate() {
        let to_mib = starts.get(i + 1).map_or(total_mib, |s| s.0);
        let span_px = (to_mib - from_mib) / x_px;
        let (text_w, text_h) = area.estimate_text_size(label, &style)?;
        let (text_w, text_h) = (f64::from(text_w), f64::from(text_h));
        let left = from_mib + PAD_PX * x_px;
        let (text, corner, size) = if span_px >= text_w + 3.0 * PAD_PX {
            across += 1;
            let y = top - (PAD_PX + f64::from(across % 2 == 0) * (text_h + 3.0 * PAD_PX)) * y_px;
            (
                Text::new(label, (left, y), style.clone()),
                (left, y),
                (text_w, text_h),
            )
        } else if span_px >= text_h + 3.0 * PAD_PX {
            // Turned a quarter clockwise, the text hangs down and to the left of its anchor.
            let y = top - PAD_PX * y_px;
            let anchor = (left + text_h * x_px, y);
            let down = style.transform(FontTransform::Rotate90);
            (Text::new(label, anchor, down), (left, y), (text_h, text_w))
        } else {
            continue;
        };
        let (w, h) = size;
        area.draw(&Rectangle::new(
            [
                (corner.0 - PAD_PX * x_px, corner.1 + PAD_PX * y_px),
                (
                    corner.0 + (w + PAD_PX) * x_px,
                    corner.1 - (h + PAD_PX) * y_px,
                ),
            ],
            background,
        ))?;
        area.draw(&text)?;
    }
    Ok(())
}
