//! What the app models build their programs from: the transaction sizes, accesses and
//! copies of the conventions in [`super`], the program's conventional shape and the
//! parsing of size arguments. Kept apart from the registry so that the apps can import
//! it without importing the list of apps.

use super::model::SizeError;
use crate::device::DeviceShape;
use crate::program::{Access, AccessOrder, CopyDirection, Distribution, Op, Slot, WeightedRange};
use crate::timing::{ISOLATED_WRITE_BYTES, READ_TRANSACTION_BYTES};

/// Bytes an isolated read moves: one 128-byte cache line (Fermi's L1 line), the read
/// transaction of the timing model.
pub(crate) const READ_LINE_BYTES: u64 = READ_TRANSACTION_BYTES;
/// Bytes an isolated write moves: one 32-byte sector (writes are write-through and not
/// coalesced), the write transaction of the timing model.
pub(crate) const WRITE_SECTOR_BYTES: u64 = ISOLATED_WRITE_BYTES;

/// Bytes `accesses` isolated accesses move when no cache serves any of them again: a
/// granule of `granule_bytes` each (what they put on the link in host memory, where
/// [`DeviceShape::random_bytes`] gives what reaches VRAM).
pub(crate) fn isolated_bytes(accesses: f64, granule_bytes: u64) -> u64 {
    (accesses.max(0.0) * granule_bytes as f64).round() as u64
}

/// `reads` isolated reads and `writes` isolated writes at uniformly random places of
/// `slot`, a region of `region_bytes`, in random order: what reaches VRAM once the L2
/// served some ([`DeviceShape::random_bytes`]), every one of them in host memory.
pub(crate) fn random_access(
    device: DeviceShape,
    slot: Slot,
    region_bytes: u64,
    (reads, writes): (f64, f64),
) -> Access {
    uniform(
        slot,
        device.random_bytes(region_bytes, reads, READ_LINE_BYTES),
        device.random_bytes(region_bytes, writes, WRITE_SECTOR_BYTES),
        AccessOrder::Random,
    )
    .read_before_l2(isolated_bytes(reads, READ_LINE_BYTES))
    .written_before_l2(isolated_bytes(writes, WRITE_SECTOR_BYTES))
}

/// An access spread uniformly over the buffer, in the given order.
pub(crate) fn uniform(slot: Slot, read_bytes: u64, write_bytes: u64, order: AccessOrder) -> Access {
    Access {
        slot,
        read_bytes,
        reread_bytes: 0,
        write_bytes,
        rewrite_bytes: 0,
        distribution: Distribution::Uniform,
        order,
    }
}

/// The research simulator's managed allocation granularity (`abstract_hardware_model.h`:
/// `MAX_PREFETCH_SIZE`, `MIN_PREFETCH_SIZE`).
const LARGE_BLOCK_BYTES: u64 = 2 << 20;
const SMALL_BLOCK_BYTES: u64 = 64 << 10;

/// Bytes the research simulator's `cudaMallocManaged` allocates for `data_bytes`: whole
/// 2 MiB blocks, and the remainder rounded up to 64 KiB times a power of two.
pub(crate) fn managed_bytes(data_bytes: u64) -> u64 {
    let whole = data_bytes / LARGE_BLOCK_BYTES * LARGE_BLOCK_BYTES;
    let remainder = data_bytes - whole;
    if remainder == 0 {
        whole
    } else {
        whole + remainder.next_power_of_two().max(SMALL_BLOCK_BYTES)
    }
}

/// An access to the first `data_bytes` of a buffer allocated with [`managed_bytes`]: the
/// rounding beyond the data is never touched.
pub(crate) fn data_access(
    slot: Slot,
    data_bytes: u64,
    read_bytes: u64,
    write_bytes: u64,
    order: AccessOrder,
) -> Access {
    Access {
        slot,
        read_bytes,
        reread_bytes: 0,
        write_bytes,
        rewrite_bytes: 0,
        distribution: Distribution::Ranges(vec![WeightedRange {
            offset_bytes: 0,
            bytes: data_bytes,
            weight: 1.0,
        }]),
        order,
    }
}

/// A synchronous host-to-device copy.
pub(crate) fn h2d(slot: Slot, bytes: u64) -> Op {
    Op::Copy {
        slot,
        direction: CopyDirection::HostToDevice,
        bytes,
    }
}

/// A synchronous device-to-host copy.
pub(crate) fn d2h(slot: Slot, bytes: u64) -> Op {
    Op::Copy {
        slot,
        direction: CopyDirection::DeviceToHost,
        bytes,
    }
}

/// The ops of an app in the conventional shape: `setup`, the measured phase running
/// `body` `repeat` times and waiting for the GPU, then `teardown`.
pub(crate) fn phased(setup: Vec<Op>, repeat: u32, body: Vec<Op>, teardown: Vec<Op>) -> Vec<Op> {
    debug_assert!(repeat >= 1, "the measured phase runs at least once");
    let mut ops = setup;
    ops.push(Op::PhaseStart);
    ops.push(Op::Repeat {
        times: repeat,
        body,
    });
    ops.push(Op::Sync);
    ops.push(Op::PhaseEnd);
    ops.extend(teardown);
    ops
}

/// A [`SizeError`] that says what was wrong and lists the accepted forms.
pub(crate) fn size_error(
    app: &'static str,
    help: &str,
    problem: impl std::fmt::Display,
) -> SizeError {
    SizeError {
        app,
        message: format!("{problem}; expected {help}"),
    }
}

/// `n` if it lies in `range`; else why not, naming it as `what` (for example
/// `"a 20000 x 20000 grid"`): what an app's size check says.
pub(crate) fn within(
    n: u64,
    range: std::ops::RangeInclusive<u64>,
    what: String,
) -> Result<u64, String> {
    if range.contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{what} is outside {} to {}",
            range.start(),
            range.end()
        ))
    }
}

/// The named sizes of a unified-memory workload: `default` and `uvmsmart` are the
/// research simulator's input, `large` one of several GiB.
pub(crate) fn workload_sizes(uvmsmart: u64, large: u64) -> [(&'static str, u64); 3] {
    [
        ("default", uvmsmart),
        ("uvmsmart", uvmsmart),
        ("large", large),
    ]
}

/// The named sizes of a PILOT benchmark: its `small`, `medium` and `large` inputs, with
/// `medium` the default.
pub(crate) fn pilot_sizes(small: u64, medium: u64, large: u64) -> [(&'static str, u64); 4] {
    [
        ("default", medium),
        ("small", small),
        ("medium", medium),
        ("large", large),
    ]
}

/// The named sizes of a Rodinia benchmark of the PILOT study: [`pilot_sizes`] and
/// `rodinia`, the input of Rodinia's run script.
pub(crate) fn pilot_rodinia_sizes(
    small: u64,
    medium: u64,
    large: u64,
    rodinia: u64,
) -> [(&'static str, u64); 5] {
    let [default, small, medium, large] = pilot_sizes(small, medium, large);
    [default, small, medium, large, ("rodinia", rodinia)]
}

/// Reads a size argument the way every app does: one of the `named` sizes, or a plain
/// decimal number that `number` turns into the app's input (or explains why not).
/// `help` lists the accepted forms for the error message.
pub(crate) fn parse_size<T: Clone>(
    app: &'static str,
    help: &str,
    size: &str,
    named: &[(&str, T)],
    number: impl FnOnce(u64) -> Result<T, String>,
) -> Result<T, SizeError> {
    let text = size.trim();
    if let Some((_, input)) = named.iter().find(|(name, _)| *name == text) {
        return Ok(input.clone());
    }
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(size_error(
            app,
            help,
            format_args!("{size:?} is not a size"),
        ));
    }
    let value = text
        .parse::<u64>()
        .map_err(|_| size_error(app, help, format_args!("{size:?} is too large")))?;
    number(value).map_err(|problem| size_error(app, help, format_args!("{size:?}: {problem}")))
}
