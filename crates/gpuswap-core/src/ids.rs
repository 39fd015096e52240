//! Identifiers handed between the driver side and the manager.

/// A tenant: an application, process or VM sharing the device; owns one address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TenantId(pub u32);

/// A buffer (buffer object) as the manager knows it. Assigned by the manager on grant.
///
/// Generation-tagged: the low [`BufferId::SLOT_BITS`] bits are the buffer's slot in the
/// manager's dense table, which a later buffer reuses once this one is freed; the high
/// bits are the allocation's serial number, unique for the manager's life, so a stale id
/// never names the slot's new buffer, and ids order as allocations do. A daemon that has
/// served billions of allocations therefore keeps state only for its live buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BufferId(pub u64);

impl BufferId {
    /// Bits of the slot: at most 2^24 (16.7 million) buffers live at once; the other 40
    /// bits number 2^40 allocations.
    pub const SLOT_BITS: u32 = 24;

    /// The id of the allocation numbered `serial` in `slot`.
    pub fn new(serial: u64, slot: usize) -> Self {
        assert!(slot < 1 << Self::SLOT_BITS, "more than 2^24 live buffers");
        assert!(
            serial < 1 << (64 - Self::SLOT_BITS),
            "more than 2^40 allocations"
        );
        Self(serial << Self::SLOT_BITS | slot as u64)
    }

    /// The slot: an index for dense per-buffer tables, reused after a free.
    pub fn slot(self) -> usize {
        (self.0 & ((1 << Self::SLOT_BITS) - 1)) as usize
    }

    /// The allocation's serial number: unique, in allocation order.
    pub fn serial(self) -> u64 {
        self.0 >> Self::SLOT_BITS
    }
}

/// An allocation request, numbered by the caller so it can match the manager's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

impl std::fmt::Display for TenantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tenant {}", self.0)
    }
}

impl std::fmt::Display for BufferId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "buffer {}", self.serial())
    }
}

/// Identifies one chunk copy the manager asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CopyId(pub u64);

/// One kernel launch, numbered by the driver so that gating answers and kernel statistics
/// name the launch they are about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LaunchId(pub u64);

impl std::fmt::Display for LaunchId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "launch {}", self.0)
    }
}
