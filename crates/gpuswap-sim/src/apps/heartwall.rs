//! Rodinia `heartwall`: tracks 51 points on the walls of a mouse heart through the
//! frames of an ultrasound video, one launch per frame.
//!
//! # The real program (Rodinia 3.1, `cuda/heartwall`)
//! The video has 104 frames of 609 x 590 pixels, held as floats in column-major order
//! with `frame_rows` = the video height (taken as 590; the model only uses it to place
//! the touched columns). The constants are those of `main.cu`: template half-size
//! `tSize` = 25 (templates of 51 x 51), search half-size `sSize` = 40 (windows of 81 x
//! 81), `maxMove` = 10, 20 endocardial and 31 epicardial points.
//!
//! Buffers, in allocation order: `frame` (1.44 MB, reused by every frame); per wall the
//! point rows and columns (20 or 31 ints, copied H2D) and the tracked locations of every
//! point in every video frame (`t_*_loc`, points x 104 ints); the templates (`endo_t`
//! 208 KB, `epi_t` 323 KB); then twelve private scratch buffers per point, allocated
//! kind by kind: `in2` (81^2 floats), `conv` (131^2), `in2_pad_cumv` (183^2),
//! `in2_pad_cumv_sel` and `in2_sub_cumh` (131 x 183), `in2_sub_cumh_sel`, `in2_sub2`
//! (131^2), `in2_sqr` (81^2), `in2_sqr_sub2` (131^2), `in_sqr` (51^2), `t_mask` and
//! `mask_conv` (131^2): 0.80 MB per point, 40.8 MB in all. Labels of per-point buffers
//! end in the point number (`conv_07`). Total 42.8 MB in 623 allocations
//! (`spec/apps.md` counts 628; the source's `cudaMalloc` calls give 623).
//!
//! Per frame: the host reads the frame from the video (`get_frame`: read, flip,
//! convert to floats; about 2.2 ms, see `FRAME_READ_NS_PER_PIXEL`), H2D of the frame
//! (1.44 MB) and of a small constant block (left out: the engine models the constant
//! buffer itself), then one launch of 51 blocks of 256 threads. Frame 0 only cuts each
//! point's 51 x 51 template out of the frame. Every
//! other frame, each block copies its 81 x 81 window out of the frame, convolves it with
//! the rotated template (in shared memory), computes windowed sums twice (of the window
//! and of its square) through padding, vertical and horizontal prefix sums and
//! selections, normalizes the correlation, builds a mask around the last position,
//! convolves it, finds the maximum and records the new position. Every 10th frame the
//! templates are blended with the frame. After the frames, the four location arrays go
//! D2H. The phase body is the frame loop.
//!
//! # Traffic per launch (derived, see the conventions in [`super`])
//! Each of the ~30 steps of a block streams its operands with consecutive threads on
//! consecutive elements; reading them step by step gives, per point and tracking frame,
//! in elements of the buffer (c = 131^2, p = 183^2, s = 131 x 183, w = 81^2, t = 51^2):
//! `in2` w written, 2w read plus the convolution's re-reads; `conv` 2c read, 2c written;
//! `in2_pad_cumv` 2p + 4s read, 4p written; `in2_pad_cumv_sel` 2s read, 2s written;
//! `in2_sub_cumh` 4s + 4c read, 6s written; `in2_sub_cumh_sel` 2c read, 2c written;
//! `in2_sub2` 3c read, 2c written; `in2_sqr` w read, w written; `in2_sqr_sub2` 5c read,
//! 5c written; `in_sqr` t read, t written; `t_mask` c written plus the mask
//! convolution's re-reads; `mask_conv` c read, c written; the template 3t read (plus t
//! read and written on update frames); the frame window w (plus t on update frames).
//! The convolutions re-read their second operand from global memory for every product;
//! a warp walking down one column of it hits the lines it just fetched, so each warp
//! moves the lines of one column per overlapping column: `in2` gets 537 warps x 31.5
//! columns x 3.5 lines of 128 B = 7.6 MB per point and frame, `t_mask` 537 x 9.8 x 2.3
//! lines = 1.5 MB. The frame is read only in the columns the windows cover (114 to 496).
//!
//! # Compute
//! The window convolution does (51 x 81)^2 = 17.1 M multiply-adds per point, about 9
//! instructions each (two loads, the multiply-add, index arithmetic and the loop); the
//! mask convolution 1285^2 = 1.65 M at about 8; the elementwise steps touch 0.56 M
//! elements at about 15 (the column-major index needs a division and a modulo). That is
//! 8.9e9 instructions per frame, 13 ms on the GTX 480 model, against 3 ms of memory
//! traffic and 0.24 ms for the frame's copy.
//!
//! # Barriers
//! A block's ~30 steps are separated by `__syncthreads`, so a step's memory traffic
//! cannot hide under another step's arithmetic. The steps fall in three groups of one
//! kind each (`PHASE_KINDS`): the window copy and its convolution (compute bound), the
//! windowed sums and normalization (elementwise, memory bound: about 2 instructions per
//! byte), the mask and its convolution (compute bound). Within a group, taking each
//! step's slowest resource in turn gives the group's sum, so the launch is timed as
//! three phases ([`crate::timing::phased_fixed_ns`]); each scratch buffer belongs to
//! the group that produces it. With its data in VRAM that adds the elementwise steps'
//! memory time to the convolutions' compute; with it in host memory, their remote
//! time. `spec/gpuswap.md` calls heartwall DMA-bound on the GPUswap testbed; with the
//! host reader, the frame copy and the phases the model still makes it compute bound,
//! and nothing in the kernel's code says otherwise, so the model does not force it.
//!
//! # Device
//! The L2 decides only whether the point lists and locations stay cached
//! ([`DeviceShape::l2_resident_reads`]); they are below a twelfth of any preset's
//! L2. The SM count would matter and is not used: the 51 blocks spread unevenly over
//! the GTX 480's 15 SMs and fill fewer than half of the 80 to 132 SMs of a V100 or later,
//! but the model spreads a launch's instructions over the whole device (see
//! [`DeviceShape::sm_count`]), so on those GPUs its compute time comes out short by up
//! to the ratio of SMs to blocks (2.1x on an A100).

use super::common::{
    READ_LINE_BYTES, WRITE_SECTOR_BYTES, d2h, h2d, parse_size, phased, uniform, within,
};
use super::model::{AppModel, SizeError};
use crate::device::{DeviceShape, scattered_bytes};
use crate::program::{
    Access, AccessOrder, Distribution, Kernel, Op, Phase, Program, Slot, WeightedRange,
};

/// The heartwall app.
pub struct Heartwall;

const HELP: &str = "default or rodinia (20 frames of test.avi; 41 MiB whatever the number \
                    of frames), or a number of frames (1 to 104)";
/// Frames in `test.avi`.
const VIDEO_FRAMES: u64 = 104;
/// Frame height (rows of the column-major frame) and width.
const FRAME_ROWS: u64 = 590;
const FRAME_COLS: u64 = 609;
/// Float and int size.
const WORD_BYTES: u64 = 4;
/// Template half-size (`tSize`) and search half-size (`sSize`).
const T_SIZE: u64 = 25;
const S_SIZE: u64 = 40;
/// Side of the point mask (`maxMove`).
const MASK_SIDE: u64 = 10;
/// Side of the template (51), of the search window (81), of the convolution (131) and
/// of the padded window (183).
const IN_SIDE: u64 = 2 * T_SIZE + 1;
const IN2_SIDE: u64 = 2 * S_SIZE + 1;
const CONV_SIDE: u64 = IN_SIDE + IN2_SIDE - 1;
const PAD_SIDE: u64 = IN2_SIDE + 2 * IN_SIDE;
/// Endocardial and epicardial points.
const ENDO_POINTS: u64 = 20;
const EPI_POINTS: u64 = 31;
/// The first and last frame column any point's search window covers: the smallest
/// initial column (155, an epicardial point) minus 41 and the largest (457) plus 39.
const FIRST_COLUMN: u64 = 155 - S_SIZE - 1;
const LAST_COLUMN: u64 = 457 + S_SIZE - 1;
/// Instructions per multiply-add of the window and of the mask convolution, and per
/// element of an elementwise step (see the module doc).
const CONV_OPS: u64 = 9;
const MASK_CONV_OPS: u64 = 8;
const ELEMENT_OPS: u64 = 15;
/// Host time to read one frame, per pixel: unconfirmed, 6 ns. `get_frame` reads the
/// frame from the video file (`AVI_read_frame`), flips it (`chop_flip_image`) and
/// converts it to floats scaled to 0..1: about three passes over its 359,310 pixels at
/// about 2 ns each on the testbed's Core i7-4770, 2.2 ms per frame.
const FRAME_READ_NS_PER_PIXEL: u64 = 6;
/// Scratch kinds (in `SCRATCH` order) per barrier-separated phase group of a tracking
/// launch: the window copy and its convolution with the template; the windowed sums
/// and the normalization (the elementwise steps); the mask and its convolution.
const PHASE_KINDS: [usize; 3] = [2, 8, 2];
/// Threads per warp.
const WARP: u64 = 32;

impl AppModel for Heartwall {
    fn name(&self) -> &'static str {
        "heartwall"
    }

    fn description(&self) -> &'static str {
        "Rodinia heartwall: tracks 51 points through ultrasound frames, 612 small private buffers"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let named = [("default", 20), ("rodinia", 20)];
        let frames = parse_size(self.name(), HELP, size, &named, |n| {
            within(n, 1..=VIDEO_FRAMES, format!("{n} frames"))
        })?;
        Ok(program(frames, repeat, device))
    }
}

/// The per-point scratch buffers: label and size in elements, in allocation order.
const SCRATCH: [(&str, u64); 12] = [
    ("in2", IN2_SIDE * IN2_SIDE),
    ("conv", CONV_SIDE * CONV_SIDE),
    ("in2_pad_cumv", PAD_SIDE * PAD_SIDE),
    ("in2_pad_cumv_sel", CONV_SIDE * PAD_SIDE),
    ("in2_sub_cumh", CONV_SIDE * PAD_SIDE),
    ("in2_sub_cumh_sel", CONV_SIDE * CONV_SIDE),
    ("in2_sub2", CONV_SIDE * CONV_SIDE),
    ("in2_sqr", IN2_SIDE * IN2_SIDE),
    ("in2_sqr_sub2", CONV_SIDE * CONV_SIDE),
    ("in_sqr", IN_SIDE * IN_SIDE),
    ("t_mask", CONV_SIDE * CONV_SIDE),
    ("mask_conv", CONV_SIDE * CONV_SIDE),
];

/// Sum over the `outputs` output positions of one dimension of a convolution of how many
/// elements of the `image` dimension overlap the `kernel` dimension, with the output
/// shifted by `offset` (the loop bounds `ja1..=ja2` of the kernel code).
fn overlaps(outputs: u64, kernel: u64, image: u64, offset: u64) -> u64 {
    (1..=outputs)
        .map(|c| {
            let j = c + offset;
            let lo = (j + 1).saturating_sub(kernel).max(1);
            (j.min(image) + 1).saturating_sub(lo)
        })
        .sum()
}

/// Bytes a convolution re-reads from its second operand: per warp, the lines of one
/// column walk (`rows` elements of the operand) per overlapping column.
fn convolution_reads(overlap_sum: u64, rows: u64) -> u64 {
    let warps = (CONV_SIDE * CONV_SIDE).div_ceil(WARP) as f64;
    let columns = overlap_sum as f64 / CONV_SIDE as f64;
    let lines = (rows * WORD_BYTES) as f64 / READ_LINE_BYTES as f64 + 1.0;
    (warps * columns * lines * READ_LINE_BYTES as f64).round() as u64
}

/// What one launch does.
#[derive(Clone, Copy, PartialEq)]
enum FrameKind {
    /// Frame 0: cut the templates.
    First,
    /// Track the points.
    Track,
    /// Track, then blend the templates with the frame (every 10th frame).
    TrackAndUpdate,
}

/// The slots of the buffers shared by all points of one wall.
#[derive(Clone, Copy)]
struct Wall {
    points: u64,
    row: Slot,
    col: Slot,
    row_loc: Slot,
    col_loc: Slot,
    template: Slot,
}

fn program(frames: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let frame = p.buffer("frame", FRAME_ROWS * FRAME_COLS * WORD_BYTES);
    // Point rows and columns, then tracked locations, per wall; templates after both.
    let lists = |p: &mut Program, name: &str, points: u64| -> [Slot; 4] {
        let list = points * WORD_BYTES;
        let track = points * VIDEO_FRAMES * WORD_BYTES;
        [
            p.buffer(format!("{name}_row"), list),
            p.buffer(format!("{name}_col"), list),
            p.buffer(format!("t_{name}_row_loc"), track),
            p.buffer(format!("t_{name}_col_loc"), track),
        ]
    };
    let endo_lists = lists(&mut p, "endo", ENDO_POINTS);
    let epi_lists = lists(&mut p, "epi", EPI_POINTS);
    let template_bytes = IN_SIDE * IN_SIDE * WORD_BYTES;
    let wall =
        |p: &mut Program, name: &str, points: u64, [row, col, row_loc, col_loc]: [Slot; 4]| Wall {
            points,
            row,
            col,
            row_loc,
            col_loc,
            template: p.buffer(format!("{name}_t"), points * template_bytes),
        };
    let endo = wall(&mut p, "endo", ENDO_POINTS, endo_lists);
    let epi = wall(&mut p, "epi", EPI_POINTS, epi_lists);
    let points = ENDO_POINTS + EPI_POINTS;
    // scratch[kind][point]
    let scratch: Vec<Vec<Slot>> = SCRATCH
        .iter()
        .map(|(kind, elements)| {
            (0..points)
                .map(|point| p.buffer(format!("{kind}_{point:02}"), elements * WORD_BYTES))
                .collect()
        })
        .collect();

    let kernel = |kind: FrameKind| -> Kernel {
        let track = kind != FrameKind::First;
        let update = kind == FrameKind::TrackAndUpdate;
        let (t, w) = (IN_SIDE * IN_SIDE, IN2_SIDE * IN2_SIDE);
        let mut accesses = Vec::new();
        // The frame: the search windows when tracking, the templates' squares otherwise.
        let frame_elements =
            points * (if track { w } else { 0 } + if update || !track { t } else { 0 });
        let column_bytes = FRAME_ROWS * WORD_BYTES;
        accesses.push(Access {
            slot: frame,
            read_bytes: frame_elements * WORD_BYTES,
            reread_bytes: 0,
            write_bytes: 0,
            rewrite_bytes: 0,
            distribution: Distribution::Ranges(vec![WeightedRange {
                offset_bytes: FIRST_COLUMN * column_bytes,
                bytes: (LAST_COLUMN - FIRST_COLUMN + 1) * column_bytes,
                weight: 1.0,
            }]),
            order: AccessOrder::Linear,
        });
        for wall in [endo, epi] {
            let n = wall.points;
            // Templates: cut on frame 0; read three times when tracking; blended on updates.
            let (template_read, template_write) = match kind {
                FrameKind::First => (0, t),
                FrameKind::Track => (3 * t, 0),
                FrameKind::TrackAndUpdate => (4 * t, t),
            };
            accesses.push(uniform(
                wall.template,
                n * template_read * WORD_BYTES,
                n * template_write * WORD_BYTES,
                AccessOrder::Linear,
            ));
            // Point lists: read by every block (they stay in L2); written on updates.
            let list_bytes = p.buffers[wall.row].bytes;
            let list_streamed = n * 3 * READ_LINE_BYTES;
            let list_reads = device.l2_resident_reads(list_bytes, list_streamed);
            let list_writes = if update {
                scattered_bytes(list_bytes, n as f64, WRITE_SECTOR_BYTES)
            } else {
                0
            };
            for list in [wall.row, wall.col] {
                accesses.push(
                    uniform(list, list_reads, list_writes, AccessOrder::Linear)
                        .read_before_l2(list_streamed),
                );
            }
            // Locations: each block writes its entry for this frame (entries are a
            // video length apart) and, when tracking, reads the previous one.
            let loc_bytes = p.buffers[wall.row_loc].bytes;
            let loc_streamed = if track { n * READ_LINE_BYTES } else { 0 };
            let loc_reads = device.l2_resident_reads(loc_bytes, loc_streamed);
            for loc in [wall.row_loc, wall.col_loc] {
                let writes = n * WRITE_SECTOR_BYTES;
                accesses.push(
                    uniform(
                        loc,
                        loc_reads,
                        writes,
                        AccessOrder::Strided {
                            stride_bytes: VIDEO_FRAMES * WORD_BYTES,
                        },
                    )
                    .read_before_l2(loc_streamed),
                );
            }
        }
        // Cutting or blending the templates: one pass over each template.
        let template_ops = if update || !track {
            points * t * ELEMENT_OPS
        } else {
            0
        };
        let mut ops = template_ops;
        let (mut convolution_ops, mut mask_ops) = (0, 0);
        if track {
            let (c, pad) = (CONV_SIDE * CONV_SIDE, PAD_SIDE * PAD_SIDE);
            let s = CONV_SIDE * PAD_SIDE;
            let window = overlaps(CONV_SIDE, IN2_SIDE, IN_SIDE, 0);
            // `mask_conv_ioffset`: (10 - 1) / 2 rounded up.
            let mask = overlaps(CONV_SIDE, MASK_SIDE, CONV_SIDE, (MASK_SIDE - 1).div_ceil(2));
            // Elements read and written per point, in SCRATCH order (module doc).
            let elements: [(u64, u64); 12] = [
                (2 * w, w),
                (2 * c, 2 * c),
                (2 * pad + 4 * s, 4 * pad),
                (2 * s, 2 * s),
                (4 * s + 4 * c, 6 * s),
                (2 * c, 2 * c),
                (3 * c, 2 * c),
                (w, w),
                (5 * c, 5 * c),
                (t, t),
                (0, c),
                (c, c),
            ];
            let extra_reads = |kind: usize| match SCRATCH[kind].0 {
                "in2" => convolution_reads(window, IN2_SIDE),
                "t_mask" => convolution_reads(mask, MASK_SIDE + WARP - 1),
                _ => 0,
            };
            for (kind, (read, write)) in elements.iter().enumerate() {
                for &slot in &scratch[kind] {
                    accesses.push(uniform(
                        slot,
                        read * WORD_BYTES + extra_reads(kind),
                        write * WORD_BYTES,
                        AccessOrder::Linear,
                    ));
                }
            }
            let element_work = 2 * w + 4 * t + 4 * pad + 8 * s + 12 * c;
            convolution_ops = window * window * CONV_OPS;
            mask_ops = mask * mask * MASK_CONV_OPS;
            ops += points * (convolution_ops + mask_ops + element_work * ELEMENT_OPS);
        }
        // Phase groups of a tracking launch (module doc): the first also holds the
        // accesses before the scratch buffers and the template work.
        let phases = if track {
            let fixed = accesses.len() - PHASE_KINDS.iter().sum::<usize>() * points as usize;
            let element_ops = ops - template_ops - points * (convolution_ops + mask_ops);
            let per_point = |kinds: usize| kinds * points as usize;
            vec![
                Phase {
                    ops: template_ops + points * convolution_ops,
                    accesses: fixed + per_point(PHASE_KINDS[0]),
                },
                Phase {
                    ops: element_ops,
                    accesses: per_point(PHASE_KINDS[1]),
                },
                Phase {
                    ops: points * mask_ops,
                    accesses: per_point(PHASE_KINDS[2]),
                },
            ]
        } else {
            Vec::new()
        };
        let name = match kind {
            FrameKind::First => "kernel (first frame)",
            FrameKind::Track => "kernel",
            FrameKind::TrackAndUpdate => "kernel (template update)",
        };
        Kernel {
            name: name.into(),
            ops,
            accesses,
            phases,
            outer_loop: Default::default(),
        }
    };

    let frame_bytes = p.buffers[frame].bytes;
    let body = (0..frames)
        .flat_map(|f| {
            let kind = match f {
                0 => FrameKind::First,
                f if f.is_multiple_of(10) => FrameKind::TrackAndUpdate,
                _ => FrameKind::Track,
            };
            [
                Op::Cpu {
                    ns: FRAME_ROWS * FRAME_COLS * FRAME_READ_NS_PER_PIXEL,
                },
                h2d(frame, frame_bytes),
                Op::Launch(kernel(kind)),
            ]
        })
        .collect();

    let mut setup = vec![Op::Alloc(frame)];
    let mut teardown = Vec::new();
    for wall in [endo, epi] {
        for list in [wall.row, wall.col] {
            setup.extend([Op::Alloc(list), h2d(list, p.buffers[list].bytes)]);
        }
        setup.extend([Op::Alloc(wall.row_loc), Op::Alloc(wall.col_loc)]);
        for loc in [wall.row_loc, wall.col_loc] {
            teardown.push(d2h(loc, p.buffers[loc].bytes));
        }
    }
    setup.extend([Op::Alloc(endo.template), Op::Alloc(epi.template)]);
    setup.extend(scratch.iter().flatten().map(|&s| Op::Alloc(s)));
    teardown.push(Op::Free(frame));
    for wall in [endo, epi] {
        teardown.extend(
            [
                wall.row,
                wall.col,
                wall.row_loc,
                wall.col_loc,
                wall.template,
            ]
            .map(Op::Free),
        );
    }
    teardown.extend(
        (0..points as usize)
            .flat_map(|point| scratch.iter().map(move |kind| Op::Free(kind[point]))),
    );
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, density, gtx480, launches, phase_body, rejects};

    #[test]
    fn footprint_is_42_8_mb_in_623_buffers() {
        let p = check_app(&Heartwall, "default");
        assert_eq!(p.buffers.len(), 623);
        let per_point: u64 = SCRATCH.iter().map(|(_, e)| e * 4).sum();
        assert_eq!(per_point, 800_496, "0.8 MB per point");
        assert!(
            (p.buffers[0].bytes as f64 / 1e6 - 1.44).abs() < 0.01,
            "1.44 MB frame"
        );
        let templates = p.buffers[9].bytes + p.buffers[10].bytes;
        assert_eq!(templates, 208_080 + 322_524);
        assert!((p.peak_allocated_bytes() as f64 / 1e6 - 42.8).abs() < 0.05);
        assert_eq!(p, Heartwall.program("rodinia", 1, gtx480()).unwrap());
    }

    #[test]
    fn one_launch_and_one_frame_copy_per_frame() {
        let p = Heartwall.program("20", 1, gtx480()).unwrap();
        let body = phase_body(&p, 1);
        assert_eq!(launches(body), 20);
        let frame_copies = body
            .iter()
            .filter(|op| {
                matches!(
                    op,
                    Op::Copy {
                        slot: 0,
                        bytes: 1_437_240,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(frame_copies, 20);
        // Each frame: read on the host, copied, tracked.
        let reads = body
            .iter()
            .filter(|op| matches!(op, Op::Cpu { .. }))
            .count();
        assert_eq!(reads, 20);
        let Op::Launch(update) = &body[3 * 10 + 2] else {
            panic!("frame 10")
        };
        assert_eq!(update.name, "kernel (template update)");
    }

    #[test]
    fn tracking_runs_in_three_barrier_phases_and_the_middle_one_is_memory_bound() {
        let p = Heartwall.program("default", 1, gtx480()).unwrap();
        p.validate().unwrap();
        let body = phase_body(&p, 1);
        let Op::Launch(track) = &body[3 + 2] else {
            panic!("frame 1")
        };
        assert_eq!(track.phases.len(), 3);
        let Op::Launch(first) = &body[2] else {
            panic!("frame 0")
        };
        assert!(
            first.phases.is_empty(),
            "cutting templates has no phases that matter"
        );
        // The elementwise steps move more bytes per instruction than the GTX 480
        // balances (3.8 instructions per byte): memory bound; the convolutions are not.
        let mut start = 0;
        let ratio: Vec<f64> = track
            .phases
            .iter()
            .map(|phase| {
                let bytes: u64 = track.accesses[start..start + phase.accesses]
                    .iter()
                    .map(|a| a.read_bytes + a.write_bytes)
                    .sum();
                start += phase.accesses;
                phase.ops as f64 / bytes as f64
            })
            .collect();
        assert!(
            ratio[0] > 3.8 && ratio[2] > 3.8 && ratio[1] < 3.8,
            "{ratio:?}"
        );
    }

    #[test]
    fn convolution_overlaps_follow_the_loop_bounds() {
        // A full convolution overlaps every pair once: 51 x 81 per dimension.
        assert_eq!(overlaps(CONV_SIDE, IN2_SIDE, IN_SIDE, 0), 51 * 81);
        // The "same"-size mask convolution loses the corners: 1285 of 131 x 10.
        assert_eq!(overlaps(CONV_SIDE, MASK_SIDE, CONV_SIDE, 5), 1285);
    }

    #[test]
    fn tracking_is_compute_bound_and_the_window_buffers_are_hottest() {
        let p = Heartwall.program("default", 1, gtx480()).unwrap();
        let body = phase_body(&p, 1);
        let Op::Launch(track) = &body[3 + 2] else {
            panic!("frame 1")
        };
        let bytes: u64 = track
            .accesses
            .iter()
            .map(|a| a.read_bytes + a.write_bytes)
            .sum();
        let (compute_s, memory_s) = (track.ops as f64 / 672e9, bytes as f64 / 177.4e9);
        assert!(compute_s > 2.0 * memory_s, "{compute_s} vs {memory_s}");
        assert!((0.010..0.020).contains(&compute_s), "{compute_s}");
        // Per byte, in2 (re-read by the convolution) beats every other scratch buffer.
        let per_byte = |slot: Slot| {
            let a = track.accesses.iter().find(|a| a.slot == slot).unwrap();
            (a.read_bytes + a.write_bytes) as f64 / p.buffers[slot].bytes as f64
        };
        let first_scratch = 11;
        let in2 = per_byte(first_scratch);
        for (kind, (label, _)) in SCRATCH.iter().enumerate().skip(1) {
            assert!(in2 > 5.0 * per_byte(first_scratch + kind * 51), "{label}");
        }
    }

    #[test]
    fn the_frame_is_read_only_where_the_windows_are() {
        let p = Heartwall.program("default", 1, gtx480()).unwrap();
        let d = density(&p, phase_body(&p, 1), 0, 609);
        // Column c of the column-major frame is bin c.
        assert_eq!(d[FIRST_COLUMN as usize - 1], 0.0);
        assert!(d[FIRST_COLUMN as usize + 1] > 0.0);
        assert!(d[LAST_COLUMN as usize - 1] > 0.0);
        assert_eq!(d[LAST_COLUMN as usize + 1], 0.0);
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Heartwall, "0", "1 to 104");
        rejects(&Heartwall, "105", "1 to 104");
        rejects(&Heartwall, "test.avi", "not a size");
    }
}
