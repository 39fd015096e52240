//! What a VM runs on its vGPU: frame-based programs (3D games and benchmarks, 2D
//! desktop programs) with GPU work and CPU work per frame, and GPU jobs that run to
//! their end (Rodinia). The spec names each program's utilization class (low, medium,
//! high); the per-frame times below are unconfirmed, chosen to give that class alone on
//! the device: utilization = GPU time / (GPU time + CPU time) per frame.

/// What a workload does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Frames until the VM leaves: each frame needs GPU work, then CPU work before the
    /// next is submitted.
    Frames {
        /// GPU time per frame.
        gpu_ns: u64,
        /// CPU time per frame (the GPU is not needed meanwhile).
        cpu_ns: u64,
    },
    /// A job: GPU work submitted at once, paced to the slices, until it is done.
    Job {
        /// GPU time it needs in all.
        gpu_ns: u64,
    },
}

/// A workload a VM can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Workload {
    /// Name in scenarios.
    pub name: &'static str,
    /// One line.
    pub description: &'static str,
    /// What it does.
    pub kind: Kind,
}

const MS: u64 = 1_000_000;

/// Every workload, in the order listings show them.
pub static WORKLOADS: &[Workload] = &[
    frames("lightsmark", "3D benchmark, low GPU utilization", 2, 14),
    frames("openarena", "3D game, high GPU utilization", 14, 2),
    frames("nexuiz", "3D game, high GPU utilization", 15, 2),
    frames("urbanterror", "3D game, high GPU utilization", 16, 2),
    frames(
        "firefox-asteroids",
        "2D canvas game in Firefox, medium GPU utilization",
        6,
        8,
    ),
    frames(
        "firefox-scrolling",
        "2D page scrolling in Firefox, low GPU utilization",
        2,
        12,
    ),
    frames(
        "gnome-system-monitor",
        "2D desktop program, low GPU utilization",
        1,
        30,
    ),
    frames("midori", "2D web browser, low GPU utilization", 2, 16),
    job("nw", "Rodinia Needleman-Wunsch as a GPU job", 2_000),
    job("lud", "Rodinia LU decomposition as a GPU job", 4_000),
    job("kmeans", "Rodinia k-means as a GPU job", 3_000),
];

const fn frames(
    name: &'static str,
    description: &'static str,
    gpu_ms: u64,
    cpu_ms: u64,
) -> Workload {
    Workload {
        name,
        description,
        kind: Kind::Frames {
            gpu_ns: gpu_ms * MS,
            cpu_ns: cpu_ms * MS,
        },
    }
}

const fn job(name: &'static str, description: &'static str, gpu_ms: u64) -> Workload {
    Workload {
        name,
        description,
        kind: Kind::Job {
            gpu_ns: gpu_ms * MS,
        },
    }
}

/// The workload called `name`.
pub fn find(name: &str) -> Option<&'static Workload> {
    WORKLOADS.iter().find(|w| w.name == name)
}

impl Workload {
    /// Its GPU utilization alone on the device (frame workloads; 1 for jobs).
    pub fn utilization_alone(&self) -> f64 {
        match self.kind {
            Kind::Frames { gpu_ns, cpu_ns } => gpu_ns as f64 / (gpu_ns + cpu_ns) as f64,
            Kind::Job { .. } => 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilization_classes_are_the_specs() {
        let u = |n: &str| find(n).unwrap().utilization_alone();
        assert!(u("lightsmark") < 0.2);
        assert!(u("firefox-asteroids") > 0.3 && u("firefox-asteroids") < 0.6);
        for high in ["openarena", "nexuiz", "urbanterror"] {
            assert!(u(high) > 0.85, "{high}");
        }
        assert_eq!(u("nw"), 1.0);
    }
}
