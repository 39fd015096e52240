//! What a fault log holds: batches of faults, as [`super`] reads them and the replay
//! turns them into a program. A leaf of its own so that the parser and the replay both
//! import the types without importing each other.

/// A fault log: the batches the driver serviced, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultLog {
    /// The batches, at least one.
    pub batches: Vec<Batch>,
}

/// One fault batch: the faults the driver fetched from the GPU's buffer and serviced
/// together, in the driver's (sorted) order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Its faults (a page faulted from several uTLBs is listed once per uTLB).
    pub faults: Vec<Fault>,
}

/// One logged fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The faulting virtual address.
    pub address: u64,
    /// When the GPU's MMU wrote the fault into its buffer, on the GPU's timer. The
    /// replay does not use it: the kernels between batches are not in the log.
    pub timestamp_ns: u64,
    /// What the access was.
    pub access: AccessType,
}

/// The access that faulted, as the driver numbers them (`uvm_fault_access_type_t`,
/// ordered by intrusiveness).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AccessType {
    /// A prefetch instruction.
    Prefetch,
    /// A read.
    Read,
    /// A write.
    Write,
    /// A weak atomic.
    AtomicWeak,
    /// A strong atomic.
    AtomicStrong,
}

impl AccessType {
    /// Whether the access writes (writes and atomics).
    pub fn writes(self) -> bool {
        self >= Self::Write
    }
}
