//! The figures of a VM run that its table, the placements' comparison and a sweep's
//! results each show: the VMs refused and the frame rates of those that rendered.

use gpuswap_vgpu::engine::{VgpuOutcome, VmOutcome};

/// How many VMs the placement refused: they failed to start.
pub fn refused(outcome: &VgpuOutcome) -> usize {
    outcome.vms.iter().filter(|v| v.error.is_some()).count()
}

/// A VM's frame rate; none for a VM that rendered no frame (refused, or a job), rather
/// than 0.
pub fn fps(vm: &VmOutcome) -> Option<f64> {
    (vm.frames > 0).then(|| vm.fps())
}

/// The mean frame rate over the VMs that rendered; none when none did.
pub fn mean_fps(outcome: &VgpuOutcome) -> Option<f64> {
    let rendered: Vec<f64> = outcome.vms.iter().filter_map(fps).collect();
    (!rendered.is_empty()).then(|| rendered.iter().sum::<f64>() / rendered.len() as f64)
}
