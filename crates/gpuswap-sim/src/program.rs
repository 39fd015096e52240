//! Tenant programs: what a tenant does, as a list of operations.
//!
//! A program names its buffers in a table ([`Program::buffers`]) and refers to them by
//! index ([`Slot`]). Operations are the CUDA calls an application makes (alloc, free,
//! memcpy, launch, synchronize) plus CPU work, loops and the measured-phase markers.

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
    /// Bytes read (after coalescing, at cache-line granularity).
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
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
        fn walk(ops: &[Op], buffers: &[BufferSpec], live: &mut u64, peak: &mut u64) {
            for op in ops {
                match op {
                    Op::Alloc(s) => {
                        *live += buffers[*s].bytes;
                        *peak = (*peak).max(*live);
                    }
                    Op::Free(s) => *live -= buffers[*s].bytes,
                    // Allocation is not repeated in practice; one pass shows the peak.
                    Op::Repeat { body, .. } => walk(body, buffers, live, peak),
                    _ => {}
                }
            }
        }
        let (mut live, mut peak) = (0, 0);
        walk(&self.ops, &self.buffers, &mut live, &mut peak);
        peak
    }
}

impl Access {
    /// Reads and writes spread uniformly over the whole buffer in linear order.
    pub fn uniform(slot: Slot, read_bytes: u64, write_bytes: u64) -> Self {
        Self {
            slot,
            read_bytes,
            write_bytes,
            distribution: Distribution::Uniform,
            order: AccessOrder::Linear,
        }
    }
}
