//! Touch hints: which managed buffers a launch names among its parameters (issue 40,
//! item 4). Each launch's pointer-sized parameters are looked up in a table of the
//! buffers' address ranges and the buffer found is marked; each progress report takes
//! the marks of its window ([`take_touched`]).
//!
//! Only parameters the driver says are 8 bytes are read (`cuFuncGetParamInfo`, CUDA
//! 12.4+, cached per kernel), and a launch's `extra` buffer within the size it gives:
//! reading past a kernel's real parameters (their count is not in the launch) could
//! fault, and a hint is never worth that, so a driver without `cuFuncGetParamInfo`
//! gives no hints from `kernelParams`. A buffer reached only through a pointer stored in
//! device memory, or through an offset the kernel adds, is not seen: the marks are
//! hints, not reference bits.
//!
//! The launch path takes no lock and allocates nothing: the table is an immutable
//! snapshot, replaced whole when a buffer is added or removed (rare: allocations; in a
//! process of more than [`PUBLISH_AT_ONCE_MAX`] buffers, at the next report), read
//! under a count of readers; a replaced snapshot is freed once no reader is counted,
//! its marks carried into the window's touched set first.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::ffi::{DevPtr, Handle, driver};

/// One buffer's addresses.
struct Span {
    start: DevPtr,
    end: DevPtr,
    id: u64,
}

/// A snapshot of the buffers, by address, with a touch mark each.
struct Table {
    spans: Vec<Span>,
    marks: Vec<AtomicBool>,
}

impl Table {
    fn new(spans: Vec<Span>) -> Box<Table> {
        let marks = spans.iter().map(|_| AtomicBool::new(false)).collect();
        Box::new(Table { spans, marks })
    }

    /// Marks the buffer `value` points into, if any.
    fn mark(&self, value: u64) {
        let after = self.spans.partition_point(|s| s.start <= value);
        if let Some(i) = after.checked_sub(1)
            && value < self.spans[i].end
            && !self.marks[i].load(Ordering::Relaxed)
        {
            self.marks[i].store(true, Ordering::Relaxed);
        }
    }

    /// The marked buffers (id, start), the marks cleared.
    fn harvest(&self, into: &mut BTreeMap<u64, DevPtr>) {
        for (span, mark) in self.spans.iter().zip(&self.marks) {
            if mark.swap(false, Ordering::Relaxed) {
                into.insert(span.id, span.start);
            }
        }
    }
}

/// The snapshot launches read; null until the first buffer.
static CURRENT: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());
/// Launches reading [`CURRENT`] now.
static READERS: AtomicUsize = AtomicUsize::new(0);

/// Buffers up to which an allocation or free publishes a new snapshot at once. Beyond,
/// the next report publishes it (a snapshot costs a copy of the table, which at every
/// allocation of a program of many thousands of buffers would be quadratic), so a
/// buffer allocated in that window is not marked until the next.
const PUBLISH_AT_ONCE_MAX: usize = 4096;

/// What the writers (allocations, frees, reports) keep, under a lock.
struct Books {
    /// Every buffer, by start: (end, id).
    buffers: BTreeMap<DevPtr, (DevPtr, u64)>,
    /// Whether `buffers` changed since the snapshot was published.
    stale: bool,
    /// Replaced snapshots not yet freed, boxed: a launch may still read one where it
    /// was published.
    #[allow(clippy::vec_box)]
    retired: Vec<Box<Table>>,
    /// Buffers marked in retired snapshots since the last report: id, start.
    touched: BTreeMap<u64, DevPtr>,
}

static BOOKS: Mutex<Books> = Mutex::new(Books {
    buffers: BTreeMap::new(),
    stale: false,
    retired: Vec::new(),
    touched: BTreeMap::new(),
});

/// Whether the table is kept (the daemon asked for progress reports).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Keeps the table from now on (the progress meter scans launches against it).
pub(crate) fn enable() {
    ENABLED.store(true, Ordering::SeqCst);
}

fn books() -> std::sync::MutexGuard<'static, Books> {
    BOOKS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Publishes a snapshot of the books' buffers (under their lock) and retires the old.
fn publish(books: &mut Books) {
    let spans = books
        .buffers
        .iter()
        .map(|(&start, &(end, id))| Span { start, end, id })
        .collect();
    let old = CURRENT.swap(Box::into_raw(Table::new(spans)), Ordering::SeqCst);
    if !old.is_null() {
        // SAFETY: from `Box::into_raw`, unpublished now, retired once.
        books.retired.push(unsafe { Box::from_raw(old) });
    }
    books.stale = false;
    reclaim(books);
}

/// After a change of the books' buffers: published at once while they are few.
fn changed(books: &mut Books) {
    books.stale = true;
    if books.buffers.len() <= PUBLISH_AT_ONCE_MAX {
        publish(books);
    }
}

/// Frees the retired snapshots once no launch reads any: a launch counted itself a
/// reader before it loaded the snapshot, so none counted now holds a retired one.
fn reclaim(books: &mut Books) {
    if books.retired.is_empty() || READERS.load(Ordering::SeqCst) != 0 {
        return;
    }
    let mut touched = std::mem::take(&mut books.touched);
    for table in books.retired.drain(..) {
        table.harvest(&mut touched);
    }
    books.touched = touched;
}

/// A buffer of the process's, now mapped at `[va, va + bytes)`.
pub(crate) fn added(id: u64, va: DevPtr, bytes: u64) {
    if ENABLED.load(Ordering::SeqCst) {
        let mut books = books();
        books.buffers.insert(va, (va.saturating_add(bytes), id));
        changed(&mut books);
    }
}

/// The buffer at `va` is freed.
pub(crate) fn removed(va: DevPtr) {
    if ENABLED.load(Ordering::SeqCst) {
        let mut books = books();
        if books.buffers.remove(&va).is_some() {
            changed(&mut books);
        }
    }
}

/// The buffers marked since the last call, each once, by id; the marks cleared.
pub(crate) fn take_touched() -> Vec<u64> {
    let mut books = books();
    if books.stale {
        publish(&mut books);
    }
    reclaim(&mut books);
    let mut touched = std::mem::take(&mut books.touched);
    // Marks carried from retired snapshots may name buffers since freed.
    touched.retain(|id, start| books.buffers.get(start).is_some_and(|b| b.1 == *id));
    let current = CURRENT.load(Ordering::SeqCst);
    // SAFETY: writers free snapshots only under the books' lock, held here.
    if let Some(table) = unsafe { current.as_ref() } {
        table.harvest(&mut touched);
    }
    touched.into_keys().collect()
}

/// Marks the buffers that a launch of `func` names among its parameters
/// (`kernel_params`, or the `extra` buffer).
///
/// # Safety
/// `kernel_params` and `extra` are a launch's, as cuda.h describes them, valid for the
/// launch call's duration.
pub(crate) unsafe fn scan(func: Handle, kernel_params: *mut *mut c_void, extra: *mut *mut c_void) {
    READERS.fetch_add(1, Ordering::SeqCst);
    let table = CURRENT.load(Ordering::SeqCst);
    // SAFETY: counted as a reader before the load: not freed until this one is done.
    if let Some(table) = unsafe { table.as_ref() }
        && !table.spans.is_empty()
    {
        // SAFETY: the caller's contract.
        unsafe { each_pointer_sized(func, kernel_params, extra, |v| table.mark(v)) };
    }
    READERS.fetch_sub(1, Ordering::SeqCst);
}

/// `CU_LAUNCH_PARAM_BUFFER_POINTER`, `_SIZE` and `_END` (cuda.h).
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;
const PARAM_END: usize = 0;

/// Parameter words read from a launch's `extra` buffer at most: kernels take few
/// arguments, and the launch path must stay cheap whatever one passes.
const EXTRA_WORDS_MAX: usize = 64;

/// Calls `each` with every 8-byte parameter value of the launch.
///
/// # Safety
/// As [`scan`].
unsafe fn each_pointer_sized(
    func: Handle,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
    mut each: impl FnMut(u64),
) {
    if !kernel_params.is_null() {
        let mut wide = layout(func);
        while wide != 0 {
            let index = wide.trailing_zeros() as usize;
            wide &= wide - 1;
            // SAFETY: the kernel has parameter `index` (the driver said so), so the
            // array has that entry, and it points at the parameter's 8 bytes.
            let value = unsafe { (*kernel_params.add(index) as *const u64).read_unaligned() };
            each(value);
        }
        return;
    }
    if extra.is_null() {
        return;
    }
    let (mut buffer, mut size) = (std::ptr::null::<u8>(), 0usize);
    // Key and value pairs up to CU_LAUNCH_PARAM_END; the size is a pointer to a size_t.
    let mut at = extra;
    // SAFETY: the caller's contract: pairs ending with CU_LAUNCH_PARAM_END.
    unsafe {
        loop {
            match *at as usize {
                PARAM_END => break,
                PARAM_BUFFER_POINTER => buffer = *at.add(1) as *const u8,
                PARAM_BUFFER_SIZE if !(*at.add(1)).is_null() => {
                    size = *(*at.add(1) as *const usize)
                }
                _ => {}
            }
            at = at.add(2);
        }
    }
    if buffer.is_null() {
        return;
    }
    // Parameters are naturally aligned in the buffer: pointers at multiples of 8.
    for word in 0..(size / 8).min(EXTRA_WORDS_MAX) {
        // SAFETY: within the `size` bytes the launch gives.
        each(unsafe { (buffer.add(word * 8) as *const u64).read_unaligned() });
    }
}

/// Slots of the per-kernel layout cache (a power of two): more than the kernels a
/// step of a large model launches often; a collision only costs a driver query.
const LAYOUT_SLOTS: usize = 1024;

/// One kernel's layout, cached: a sequence lock (odd while written), the kernel, and
/// the mask of its 8-byte parameters (bit i: parameter i).
struct Slot {
    seq: AtomicU64,
    func: AtomicUsize,
    wide: AtomicU64,
}

static LAYOUTS: [Slot; LAYOUT_SLOTS] = [const {
    Slot {
        seq: AtomicU64::new(0),
        func: AtomicUsize::new(0),
        wide: AtomicU64::new(0),
    }
}; LAYOUT_SLOTS];
/// Serializes the cache's writers (a miss: rare).
static LAYOUT_WRITER: Mutex<()> = Mutex::new(());

/// The mask of `func`'s 8-byte parameters among its first 64: cached, else asked of
/// the driver (0 where it cannot say).
fn layout(func: Handle) -> u64 {
    let key = func as usize;
    let slot = &LAYOUTS[(key >> 4) % LAYOUT_SLOTS];
    let seq = slot.seq.load(Ordering::SeqCst);
    if seq.is_multiple_of(2) && slot.func.load(Ordering::SeqCst) == key {
        let wide = slot.wide.load(Ordering::SeqCst);
        if slot.seq.load(Ordering::SeqCst) == seq {
            return wide;
        }
    }
    let wide = ask_layout(func);
    let _writer = LAYOUT_WRITER.lock().unwrap_or_else(PoisonError::into_inner);
    slot.seq.fetch_add(1, Ordering::SeqCst);
    slot.func.store(key, Ordering::SeqCst);
    slot.wide.store(wide, Ordering::SeqCst);
    slot.seq.fetch_add(1, Ordering::SeqCst);
    wide
}

/// The driver's answer for [`layout`].
fn ask_layout(func: Handle) -> u64 {
    let mut wide = 0u64;
    for index in 0..64 {
        match driver::param_info(func, index) {
            Some((_, 8)) => wide |= 1 << index,
            Some(_) => {}
            None => break,
        }
    }
    wide
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: DevPtr, end: DevPtr, id: u64) -> Span {
        Span { start, end, id }
    }

    #[test]
    fn a_value_marks_the_buffer_it_points_into_and_nothing_else() {
        let table = Table::new(vec![span(0x1000, 0x2000, 7), span(0x4000, 0x4100, 9)]);
        for v in [0xfff, 0x2000, 0x3fff, 0x4100, 0, u64::MAX] {
            table.mark(v);
        }
        let mut touched = BTreeMap::new();
        table.harvest(&mut touched);
        assert!(touched.is_empty(), "{touched:?}");
        table.mark(0x1fff);
        table.mark(0x4000);
        table.mark(0x1000);
        table.harvest(&mut touched);
        assert_eq!(
            touched.into_iter().collect::<Vec<_>>(),
            [(7, 0x1000), (9, 0x4000)]
        );
        // Harvesting cleared the marks.
        let mut again = BTreeMap::new();
        table.harvest(&mut again);
        assert!(again.is_empty());
    }

    /// Marks `value` in the published snapshot, as a launch does.
    fn mark_current(value: u64) {
        READERS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: counted as a reader.
        unsafe { CURRENT.load(Ordering::SeqCst).as_ref() }
            .unwrap()
            .mark(value);
        READERS.fetch_sub(1, Ordering::SeqCst);
    }

    #[test]
    fn marks_outlive_a_new_snapshot_and_a_freed_buffer_is_not_named() {
        // The only test of the process-wide table.
        enable();
        added(1, 0x10_0000, 0x1000);
        added(2, 0x20_0000, 0x1000);
        mark_current(0x10_0010);
        mark_current(0x20_0fff);
        // A new snapshot: the marks of the old are carried; buffer 1 is gone.
        added(3, 0x30_0000, 0x1000);
        removed(0x10_0000);
        mark_current(0x30_0000);
        assert_eq!(take_touched(), [2, 3]);
        assert_eq!(take_touched(), Vec::<u64>::new());
    }

    #[test]
    fn the_extra_buffer_is_read_within_its_size() {
        let words: [u64; 3] = [0x1000, 42, 0x4000];
        let mut size = 16usize;
        let mut extra = [
            PARAM_BUFFER_POINTER as *mut c_void,
            words.as_ptr() as *mut c_void,
            PARAM_BUFFER_SIZE as *mut c_void,
            (&mut size as *mut usize).cast(),
            PARAM_END as *mut c_void,
        ];
        let mut seen = Vec::new();
        // SAFETY: a well-formed extra array over live locals.
        unsafe {
            each_pointer_sized(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                extra.as_mut_ptr(),
                |v| seen.push(v),
            )
        };
        assert_eq!(seen, [0x1000, 42]);
    }
}
