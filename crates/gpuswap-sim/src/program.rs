//! Tenant programs: what a tenant does, as a list of operations.
//!
//! A program names its buffers in a table ([`Program::buffers`]) and refers to them by
//! index ([`Slot`]). Operations are the CUDA calls an application makes (alloc, free,
//! memcpy, launch, synchronize) plus CPU work, loops and the measured-phase markers.

use std::ops::Deref;
use std::sync::Arc;

use gpuswap_core::BufferKind;

/// Index of a buffer in [`Program::buffers`].
pub type Slot = usize;

/// A buffer a program allocates.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferSpec {
    /// The app model's name for the buffer (priorities refer to buffers by label).
    pub label: String,
    /// Size of the allocation.
    pub bytes: u64,
    /// Application buffer or runtime system buffer.
    pub kind: BufferKind,
}

/// How a kernel's accesses to one buffer spread over the buffer's pages.
#[derive(Clone, Debug, PartialEq)]
pub enum Distribution {
    /// Every byte of the buffer equally likely.
    Uniform,
    /// Byte ranges of the buffer with relative weights; bytes outside every range are
    /// not accessed. Weight is per range (not per byte).
    Ranges(Vec<WeightedRange>),
    /// One relative weight per page of `page_bytes`, in address order (the last page may
    /// be partial).
    Profile {
        /// Page size the weights refer to.
        page_bytes: u64,
        /// Relative weight of each page.
        weights: Vec<f64>,
    },
}

/// A byte range of a buffer with a relative weight.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightedRange {
    /// First byte of the range.
    pub offset_bytes: u64,
    /// Length of the range.
    pub bytes: u64,
    /// Relative weight of the whole range.
    pub weight: f64,
}

/// The order in which a kernel touches a buffer's pages (matters for demand paging).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessOrder {
    /// Increasing addresses.
    Linear,
    /// Increasing addresses with a fixed stride between consecutive accesses.
    Strided {
        /// Distance between consecutive accesses.
        stride_bytes: u64,
    },
    /// Uniformly random addresses.
    Random,
}

/// The traffic of one kernel launch to one buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    /// The buffer.
    pub slot: Slot,
    /// Bytes read (after coalescing, at cache-line granularity), once the L2 has served
    /// the re-reads of lines this launch already brought in.
    pub read_bytes: u64,
    /// Bytes of re-reads the L2 served (not in `read_bytes`). A line of host memory is
    /// not cached on the GPU, so each of them crosses the link again where the buffer is
    /// remote (NVIDIA's CUDA C++ Best Practices Guide, "Zero Copy": "any repeated access
    /// to such memory areas causes repeated CPU-GPU transfers").
    pub reread_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Bytes of stores the L2 combined with earlier stores of this launch to the same
    /// lines (not in `write_bytes`); in host memory each crosses the link, for the same
    /// reason.
    pub rewrite_bytes: u64,
    /// How those bytes spread over the buffer.
    pub distribution: Distribution,
    /// In which order.
    pub order: AccessOrder,
}

/// One kernel launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// The kernel function's name.
    pub name: String,
    /// Arithmetic work: instructions executed summed over all threads. The device turns it
    /// into the compute time `C` of the timing model.
    pub ops: u64,
    /// Memory traffic per buffer.
    pub accesses: Vec<Access>,
    /// Barrier-separated phases in order, each a share of `ops` and the next run of
    /// `accesses`; empty for a kernel without barriers that matter (one phase). A kernel
    /// whose threads all wait at a barrier cannot overlap one phase's memory traffic with
    /// another's arithmetic, so the timing model takes each phase's slowest resource in
    /// turn.
    pub phases: Vec<Phase>,
    /// Its outermost loop, where PILOT's preemption check goes (zero where the kernel
    /// has no loop, or where its app does not model its loops).
    pub outer_loop: OuterLoop,
}

#[cfg(test)]
impl Kernel {
    /// For tests: a kernel `k` of one instruction that makes `accesses` in one phase,
    /// without a loop.
    pub(crate) fn simple(accesses: Vec<Access>) -> Self {
        Kernel {
            name: "k".into(),
            ops: 1,
            accesses,
            phases: Vec::new(),
            outer_loop: Default::default(),
        }
    }
}

/// The outermost loop of a [`Kernel`]'s threads: PILOT's binary instrumentation reads its
/// preemption flag before that loop's back-edge, once per trip of every thread
/// (`../shared/spec/pilot.md`). See [`crate::preemption`] for what that costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OuterLoop {
    /// Threads of the launch (those that only test a bound and return included).
    pub threads: u64,
    /// Trips of the outermost loop, summed over the threads: 0 for a kernel without a
    /// loop, which PILOT cannot stop before it ends.
    pub trips: u64,
}

impl OuterLoop {
    /// `threads` threads that each make `trips_each` trips.
    pub fn uniform(threads: u64, trips_each: u64) -> Self {
        Self {
            threads,
            trips: threads.saturating_mul(trips_each),
        }
    }
}

/// One barrier-separated phase of a [`Kernel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phase {
    /// Its instructions.
    pub ops: u64,
    /// How many of the kernel's accesses, following the previous phase's, are its own.
    pub accesses: usize,
}

/// Direction of a host copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDirection {
    /// cudaMemcpy host to device.
    HostToDevice,
    /// cudaMemcpy device to host.
    DeviceToHost,
}

/// One operation of a program.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Allocate the buffer of this slot.
    Alloc(Slot),
    /// Free the buffer of this slot.
    Free(Slot),
    /// Synchronous memcpy of `bytes` of the buffer (stream ordered: waits for the
    /// tenant's queued kernels first).
    Copy {
        /// The buffer.
        slot: Slot,
        /// Direction.
        direction: CopyDirection,
        /// Bytes copied (at most the buffer size).
        bytes: u64,
    },
    /// Asynchronous kernel launch into the tenant's channel.
    Launch(Kernel),
    /// Wait until every launched kernel has finished.
    Sync,
    /// Host computation that keeps the tenant busy without using the GPU.
    Cpu {
        /// Duration.
        ns: u64,
    },
    /// Run `body` `times` times.
    Repeat {
        /// Repetitions (at least one).
        times: u32,
        /// The operations repeated.
        body: Vec<Op>,
    },
    /// Start of the measured phase.
    PhaseStart,
    /// End of the measured phase.
    PhaseEnd,
}

/// A finished program shared by every configuration that runs it: a sweep's seeds of a
/// point and the solo baselines all hold the same one, so cloning a configuration copies
/// no operation, and comparing two (a baseline lookup) compares the operations only when
/// they are not the very same program.
#[derive(Clone, Debug)]
pub struct SharedProgram(Arc<Program>);

impl PartialEq for SharedProgram {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Deref for SharedProgram {
    type Target = Program;

    fn deref(&self) -> &Program {
        &self.0
    }
}

impl From<Program> for SharedProgram {
    fn from(program: Program) -> Self {
        Self(Arc::new(program))
    }
}

/// What one tenant runs.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program {
    /// Every buffer the program may allocate.
    pub buffers: Vec<BufferSpec>,
    /// The operations, in order.
    pub ops: Vec<Op>,
}

impl Program {
    /// Adds a buffer to the table and returns its slot.
    pub fn buffer(&mut self, label: impl Into<String>, bytes: u64) -> Slot {
        self.buffer_of_kind(label, bytes, BufferKind::Device)
    }

    /// Adds a buffer of a given kind to the table and returns its slot.
    pub fn buffer_of_kind(
        &mut self,
        label: impl Into<String>,
        bytes: u64,
        kind: BufferKind,
    ) -> Slot {
        self.buffers.push(BufferSpec {
            label: label.into(),
            bytes,
            kind,
        });
        self.buffers.len() - 1
    }

    /// The largest sum of bytes allocated at once, following the ops in order.
    pub fn peak_allocated_bytes(&self) -> u64 {
        self.peak_footprint_bytes(1)
    }

    /// The most memory live at once with every buffer rounded up to whole
    /// `granule_bytes` (4 KiB: the pages managed memory takes).
    pub fn peak_footprint_bytes(&self, granule_bytes: u64) -> u64 {
        fn walk(ops: &[Op], buffers: &[u64], live: &mut u64, peak: &mut u64) {
            for op in ops {
                match op {
                    Op::Alloc(s) => {
                        *live += buffers[*s];
                        *peak = (*peak).max(*live);
                    }
                    Op::Free(s) => *live -= buffers[*s],
                    // Allocation is not repeated in practice; one pass shows the peak.
                    Op::Repeat { body, .. } => walk(body, buffers, live, peak),
                    _ => {}
                }
            }
        }
        let sizes: Vec<u64> = self
            .buffers
            .iter()
            .map(|b| b.bytes.next_multiple_of(granule_bytes.max(1)))
            .collect();
        let (mut live, mut peak) = (0, 0);
        walk(&self.ops, &sizes, &mut live, &mut peak);
        peak
    }

    /// Checks that the program is well formed: every op names an existing slot; a buffer
    /// is allocated before it is copied, launched on or freed, never allocated twice while
    /// live, and freed by the end; copies fit their buffer; loops run at least once and
    /// leave allocations as they found them; ranges lie inside their buffer; weights are
    /// finite, non-negative and not all zero; a profile has one weight per page of its
    /// buffer; `PhaseStart` and `PhaseEnd` appear at most once each, in that order, outside
    /// any repeated loop. The error names the op (`ops[4].body[2]`) and what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let mut check = Validation {
            buffers: &self.buffers,
            live: vec![false; self.buffers.len()],
            phase_started: false,
            phase_ended: false,
        };
        check.ops(&self.ops, "ops", false)?;
        if check.phase_started && !check.phase_ended {
            return Err("the measured phase starts but never ends".into());
        }
        match check.live.iter().position(|&live| live) {
            Some(slot) => Err(format!(
                "buffer {} is still allocated at the end",
                check.name(slot)
            )),
            None => Ok(()),
        }
    }
}

impl Access {
    /// Reads and writes spread uniformly over the whole buffer in linear order.
    pub fn uniform(slot: Slot, read_bytes: u64, write_bytes: u64) -> Self {
        Self {
            slot,
            read_bytes,
            reread_bytes: 0,
            write_bytes,
            rewrite_bytes: 0,
            distribution: Distribution::Uniform,
            order: AccessOrder::Linear,
        }
    }

    /// This access, whose threads read `unfiltered_read_bytes` before the L2 served the
    /// re-reads among them: what its reads of host memory put on the link.
    pub fn read_before_l2(mut self, unfiltered_read_bytes: u64) -> Self {
        self.reread_bytes = unfiltered_read_bytes.saturating_sub(self.read_bytes);
        self
    }

    /// This access, whose threads stored `unfiltered_write_bytes` before the L2 combined
    /// the stores to lines already written: what its stores to host memory put on the
    /// link.
    pub fn written_before_l2(mut self, unfiltered_write_bytes: u64) -> Self {
        self.rewrite_bytes = unfiltered_write_bytes.saturating_sub(self.write_bytes);
        self
    }
}

/// The state [`Program::validate`] follows through the ops.
struct Validation<'a> {
    buffers: &'a [BufferSpec],
    live: Vec<bool>,
    phase_started: bool,
    phase_ended: bool,
}

impl Validation<'_> {
    fn name(&self, slot: Slot) -> String {
        format!("{slot} ({:?})", self.buffers[slot].label)
    }

    /// The slot if it exists.
    fn slot(&self, slot: Slot, at: &str) -> Result<Slot, String> {
        if slot < self.buffers.len() {
            Ok(slot)
        } else {
            Err(format!(
                "{at}: slot {slot} does not exist (the program has {} buffers)",
                self.buffers.len()
            ))
        }
    }

    /// The slot if it exists and is allocated.
    fn live_slot(&self, slot: Slot, at: &str, what: &str) -> Result<Slot, String> {
        let slot = self.slot(slot, at)?;
        if self.live[slot] {
            Ok(slot)
        } else {
            Err(format!(
                "{at}: {what} buffer {}, which is not allocated",
                self.name(slot)
            ))
        }
    }

    fn ops(&mut self, ops: &[Op], path: &str, repeated: bool) -> Result<(), String> {
        for (i, op) in ops.iter().enumerate() {
            let at = format!("{path}[{i}]");
            match op {
                Op::Alloc(slot) => {
                    let slot = self.slot(*slot, &at)?;
                    if self.live[slot] {
                        return Err(format!(
                            "{at}: buffer {} is allocated while already live",
                            self.name(slot)
                        ));
                    }
                    self.live[slot] = true;
                }
                Op::Free(slot) => {
                    let slot = self.live_slot(*slot, &at, "free of")?;
                    self.live[slot] = false;
                }
                Op::Copy { slot, bytes, .. } => {
                    let slot = self.live_slot(*slot, &at, "copy of")?;
                    let size = self.buffers[slot].bytes;
                    if *bytes > size {
                        return Err(format!(
                            "{at}: copy of {bytes} B exceeds buffer {} of {size} B",
                            self.name(slot)
                        ));
                    }
                }
                Op::Launch(kernel) => {
                    if !kernel.phases.is_empty() {
                        let ops: u64 = kernel.phases.iter().map(|p| p.ops).sum();
                        let accesses: usize = kernel.phases.iter().map(|p| p.accesses).sum();
                        if ops != kernel.ops || accesses != kernel.accesses.len() {
                            return Err(format!(
                                "{at}: kernel {:?}: its phases hold {ops} instructions and {accesses} accesses, the kernel {} and {}",
                                kernel.name,
                                kernel.ops,
                                kernel.accesses.len()
                            ));
                        }
                    }
                    for access in &kernel.accesses {
                        let what = format!("kernel {:?} accesses", kernel.name);
                        let slot = self.live_slot(access.slot, &at, &what)?;
                        let size = self.buffers[slot].bytes;
                        check_distribution(&access.distribution, size).map_err(|e| {
                            format!(
                                "{at}: kernel {:?}, buffer {}: {e}",
                                kernel.name,
                                self.name(slot)
                            )
                        })?;
                    }
                }
                Op::Repeat { times, body } => {
                    if *times == 0 {
                        return Err(format!("{at}: a loop must run at least once"));
                    }
                    let before = self.live.clone();
                    self.ops(body, &format!("{at}.body"), repeated || *times > 1)?;
                    // One pass that leaves allocations as it found them makes every pass
                    // valid; one that does not would fail on its second pass.
                    if *times > 1 && self.live != before {
                        return Err(format!(
                            "{at}: the loop body allocates or frees buffers it does not \
                             release or reallocate, so its second pass is invalid"
                        ));
                    }
                }
                Op::PhaseStart => {
                    if self.phase_started {
                        return Err(format!("{at}: a second PhaseStart"));
                    }
                    if repeated {
                        return Err(format!("{at}: PhaseStart inside a repeated loop"));
                    }
                    self.phase_started = true;
                }
                Op::PhaseEnd => {
                    if !self.phase_started {
                        return Err(format!("{at}: PhaseEnd before PhaseStart"));
                    }
                    if self.phase_ended {
                        return Err(format!("{at}: a second PhaseEnd"));
                    }
                    if repeated {
                        return Err(format!("{at}: PhaseEnd inside a repeated loop"));
                    }
                    self.phase_ended = true;
                }
                Op::Sync | Op::Cpu { .. } => {}
            }
        }
        Ok(())
    }
}

/// Checks that a distribution fits a buffer of `size` bytes.
fn check_distribution(distribution: &Distribution, size: u64) -> Result<(), String> {
    let weights_ok = |weights: &mut dyn Iterator<Item = f64>| -> Result<(), String> {
        let mut total = 0.0;
        for w in weights {
            if !w.is_finite() || w < 0.0 {
                return Err(format!("weight {w} is not a finite non-negative number"));
            }
            total += w;
        }
        if total > 0.0 {
            Ok(())
        } else {
            Err("all weights are zero".into())
        }
    };
    match distribution {
        Distribution::Uniform => Ok(()),
        Distribution::Ranges(ranges) => {
            if ranges.is_empty() {
                return Err("the distribution has no ranges".into());
            }
            for r in ranges {
                let end = r.offset_bytes.checked_add(r.bytes);
                if end.is_none_or(|end| end > size) || r.bytes == 0 {
                    return Err(format!(
                        "range of {} B at offset {} is empty or outside the buffer of {size} B",
                        r.bytes, r.offset_bytes
                    ));
                }
            }
            weights_ok(&mut ranges.iter().map(|r| r.weight))
        }
        Distribution::Profile {
            page_bytes,
            weights,
        } => {
            if *page_bytes == 0 {
                return Err("profile page size is zero".into());
            }
            let pages = size.div_ceil(*page_bytes);
            if weights.len() as u64 != pages {
                return Err(format!(
                    "profile has {} weights but the buffer has {pages} pages of {page_bytes} B",
                    weights.len()
                ));
            }
            weights_ok(&mut weights.iter().copied())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(accesses: Vec<Access>) -> Op {
        Op::Launch(Kernel::simple(accesses))
    }

    /// A well-formed program: one buffer, set up, used in a repeated phase, freed.
    fn good() -> Program {
        let mut p = Program::default();
        let a = p.buffer("a", 10_000);
        p.ops = vec![
            Op::Alloc(a),
            Op::Copy {
                slot: a,
                direction: CopyDirection::HostToDevice,
                bytes: 10_000,
            },
            Op::PhaseStart,
            Op::Repeat {
                times: 3,
                body: vec![kernel(vec![Access::uniform(a, 8, 8)]), Op::Sync],
            },
            Op::PhaseEnd,
            Op::Free(a),
        ];
        p
    }

    /// `good()` with `edit` applied must fail validation with a message containing
    /// `fragment`.
    fn fails(edit: impl FnOnce(&mut Program), fragment: &str) {
        let mut p = good();
        edit(&mut p);
        let err = p.validate().expect_err("invalid");
        assert!(err.contains(fragment), "{fragment:?} in {err:?}");
    }

    fn with_distribution(distribution: Distribution) -> impl FnOnce(&mut Program) {
        move |p| {
            p.ops[3] = Op::Repeat {
                times: 1,
                body: vec![kernel(vec![Access {
                    distribution,
                    ..Access::uniform(0, 1, 0)
                }])],
            }
        }
    }

    #[test]
    fn a_well_formed_program_validates() {
        assert_eq!(good().validate(), Ok(()));
        assert_eq!(Program::default().validate(), Ok(()));
    }

    #[test]
    fn slots_must_exist_and_be_allocated_when_used() {
        fails(|p| p.ops[0] = Op::Alloc(7), "slot 7 does not exist");
        fails(
            |p| drop(p.ops.remove(0)),
            "ops[0]: copy of buffer 0 (\"a\"), which is not allocated",
        );
        fails(
            |p| {
                p.ops.swap(3, 5);
                p.ops.swap(4, 5);
            },
            "which is not allocated",
        );
        fails(|p| p.ops.insert(1, Op::Alloc(0)), "already live");
        fails(|p| p.ops.push(Op::Free(0)), "ops[6]: free of buffer 0");
        fails(|p| drop(p.ops.pop()), "still allocated at the end");
    }

    #[test]
    fn copies_fit_and_loops_run() {
        fails(
            |p| {
                p.ops[1] = Op::Copy {
                    slot: 0,
                    direction: CopyDirection::DeviceToHost,
                    bytes: 10_001,
                }
            },
            "exceeds buffer",
        );
        fails(
            |p| {
                p.ops[3] = Op::Repeat {
                    times: 0,
                    body: vec![],
                }
            },
            "at least once",
        );
        // A repeated body that allocates without freeing breaks on its second pass.
        fails(
            |p| {
                let b = p.buffer("b", 1);
                p.ops[3] = Op::Repeat {
                    times: 2,
                    body: vec![Op::Alloc(b)],
                };
            },
            "second pass",
        );
        // Once is fine, and balanced bodies may repeat.
        let mut p = good();
        let b = p.buffer("b", 1);
        p.ops[3] = Op::Repeat {
            times: 5,
            body: vec![Op::Alloc(b), Op::Free(b)],
        };
        assert_eq!(p.validate(), Ok(()));
    }

    #[test]
    fn phases_must_cover_the_kernels_work() {
        let with_phases = |phases: Vec<Phase>| {
            move |p: &mut Program| {
                p.ops[3] = Op::Launch(Kernel {
                    ops: 10,
                    phases,
                    ..Kernel::simple(vec![Access::uniform(0, 8, 8), Access::uniform(0, 8, 0)])
                });
            }
        };
        let phase = |ops, accesses| Phase { ops, accesses };
        let mut p = good();
        with_phases(vec![phase(4, 1), phase(6, 1)])(&mut p);
        assert_eq!(p.validate(), Ok(()));
        fails(
            with_phases(vec![phase(4, 1), phase(5, 1)]),
            "9 instructions and 2 accesses, the kernel 10 and 2",
        );
        fails(
            with_phases(vec![phase(10, 1)]),
            "10 instructions and 1 accesses",
        );
    }

    #[test]
    fn distributions_must_fit_the_buffer() {
        let range = |offset_bytes, bytes, weight| WeightedRange {
            offset_bytes,
            bytes,
            weight,
        };
        fails(
            with_distribution(Distribution::Ranges(vec![range(9_000, 1_001, 1.0)])),
            "outside the buffer",
        );
        fails(
            with_distribution(Distribution::Ranges(vec![range(u64::MAX, 2, 1.0)])),
            "outside the buffer",
        );
        fails(with_distribution(Distribution::Ranges(vec![])), "no ranges");
        fails(
            with_distribution(Distribution::Ranges(vec![range(0, 10, f64::NAN)])),
            "finite non-negative",
        );
        fails(
            with_distribution(Distribution::Ranges(vec![range(0, 10, 0.0)])),
            "all weights are zero",
        );
        // 10 000 bytes in pages of 4096: three pages, the last partial.
        fails(
            with_distribution(Distribution::Profile {
                page_bytes: 4096,
                weights: vec![1.0, 1.0],
            }),
            "3 pages",
        );
        fails(
            with_distribution(Distribution::Profile {
                page_bytes: 4096,
                weights: vec![1.0, -1.0, 1.0],
            }),
            "finite non-negative",
        );
        let mut p = good();
        with_distribution(Distribution::Profile {
            page_bytes: 4096,
            weights: vec![1.0, 2.0, 0.5],
        })(&mut p);
        assert_eq!(p.validate(), Ok(()));
    }

    #[test]
    fn the_phase_is_marked_once_in_order_outside_repeated_loops() {
        fails(|p| p.ops.insert(2, Op::PhaseStart), "a second PhaseStart");
        fails(|p| p.ops.insert(5, Op::PhaseEnd), "a second PhaseEnd");
        fails(|p| p.ops.swap(2, 4), "PhaseEnd before PhaseStart");
        fails(|p| drop(p.ops.remove(4)), "never ends");
        fails(
            |p| {
                let Op::Repeat { body, .. } = &mut p.ops[3] else {
                    unreachable!()
                };
                body.push(Op::PhaseEnd);
                p.ops.remove(4);
            },
            "PhaseEnd inside a repeated loop",
        );
    }

    #[test]
    fn a_shared_program_equals_its_clones_and_equal_programs() {
        let build = |weight: f64| {
            let mut p = Program::default();
            let a = p.buffer("a", 1 << 20);
            p.ops = vec![kernel(vec![Access {
                distribution: Distribution::Profile {
                    page_bytes: 1 << 20,
                    weights: vec![weight],
                },
                ..Access::uniform(a, 10, 0)
            }])];
            SharedProgram::from(p)
        };
        assert_eq!(build(1.0), build(1.0));
        assert_ne!(build(1.0), build(2.0));
        // Identity decides before contents: a NaN weight (never equal by value) still
        // lets a program equal its clones, which share it.
        let odd = build(f64::NAN);
        assert_ne!(odd, build(f64::NAN));
        assert_eq!(odd, odd.clone());
    }
}
