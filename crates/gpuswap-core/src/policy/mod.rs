//! Memory policies: what a manager does when memory runs short. Each mode is one
//! [`MemoryPolicy`] in its own file, registered once in [`crate::registry`]; the manager
//! calls its hooks and carries out what it decides through a [`Ctx`].

mod hooks;

pub(crate) mod fcfs;
pub(crate) mod gdev;
pub(crate) mod gpuswap;
pub(crate) mod native;
pub(crate) mod static_share;
pub(crate) mod uvm;

pub(crate) use hooks::{Ctx, LaunchPrep, MemoryPolicy, Placed};
