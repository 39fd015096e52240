//! The CUDA driver API as this library sees it: the few types and constants of cuda.h
//! it needs (CUDA 12's ABI), the real libcuda's functions looked up by name, and the
//! real `dlsym` (ours shadows it). Every call into C made by this crate is in this
//! module or in `hooks.rs`.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use crate::diag;

/// `CUresult`.
pub type CuResult = c_int;
/// `CUdeviceptr` on 64-bit platforms.
pub type DevPtr = u64;
/// Opaque handles (`CUcontext`, `CUstream`, ...).
pub type Handle = *mut c_void;

pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
pub const CUDA_ERROR_INVALID_CONTEXT: CuResult = 201;
pub const CUDA_ERROR_NOT_READY: CuResult = 600;
pub const CUDA_ERROR_NOT_SUPPORTED: CuResult = 801;
pub const CUDA_ERROR_UNKNOWN: CuResult = 999;

/// `CU_MEM_LOCATION_TYPE_DEVICE`, `_HOST` and `_HOST_NUMA` (`CUmemLocationType`,
/// cuda.h 12.2+).
pub const LOCATION_DEVICE: c_int = 1;
pub const LOCATION_HOST: c_int = 2;
const LOCATION_HOST_NUMA: c_int = 3;
/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
const ALLOCATION_PINNED: c_int = 1;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const HANDLE_TYPE_POSIX_FD: c_int = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
const ACCESS_READWRITE: c_int = 3;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemLocation {
    pub kind: c_int,
    pub id: c_int,
}

/// `CUmemAllocationProp`.
#[repr(C)]
pub struct AllocationProp {
    kind: c_int,
    requested_handle_types: c_int,
    location: MemLocation,
    win32_handle_meta_data: *mut c_void,
    alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc`.
#[repr(C)]
struct AccessDesc {
    location: MemLocation,
    flags: c_int,
}

/// `CUlaunchConfig` (cuda.h 11.8+), as `cuLaunchKernelEx` takes it.
#[repr(C)]
pub struct LaunchConfig {
    pub grid: [std::ffi::c_uint; 3],
    pub block: [std::ffi::c_uint; 3],
    pub shared_bytes: std::ffi::c_uint,
    pub stream: Handle,
    pub attrs: *mut c_void,
    pub num_attrs: std::ffi::c_uint,
}

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// The real `dlsym`: this library exports its own, which the runtime's look-ups reach.
pub fn real_dlsym() -> DlsymFn {
    static REAL: OnceLock<usize> = OnceLock::new();
    let addr = *REAL.get_or_init(|| {
        // SAFETY: dlvsym with RTLD_NEXT and NUL-terminated names; glibc's dlsym has
        // carried version GLIBC_2.2.5 on x86-64 since its first release.
        let p =
            unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), c"GLIBC_2.2.5".as_ptr()) };
        assert!(!p.is_null(), "gpuswap: glibc's dlsym not found");
        p as usize
    });
    // SAFETY: the address is glibc's dlsym, whose type this is.
    unsafe { std::mem::transmute::<usize, DlsymFn>(addr) }
}

/// The real driver library: `GPUSWAP_REAL_LIBCUDA`, else `libcuda.so.1` as the dynamic
/// linker finds it; `None` (with a message, once) if it cannot be loaded.
fn real_library() -> Option<usize> {
    static HANDLE: OnceLock<Option<usize>> = OnceLock::new();
    *HANDLE.get_or_init(|| {
        let name = library_name();
        let c = std::ffi::CString::new(name.clone()).unwrap_or_default();
        // SAFETY: a NUL-terminated path; the handle is kept for the process's life.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            // SAFETY: dlerror returns null or a NUL-terminated message of this thread's
            // last failure, read at once.
            let error = unsafe { libc::dlerror() };
            let why = if error.is_null() {
                String::new()
            } else {
                // SAFETY: as above.
                format!(": {}", unsafe { CStr::from_ptr(error) }.to_string_lossy())
            };
            diag::warn(&format!("cannot load the CUDA driver library {name}{why}"));
            return None;
        }
        Some(h as usize)
    })
}

/// The driver library's name: `GPUSWAP_REAL_LIBCUDA`, else `libcuda.so.1`.
fn library_name() -> String {
    std::env::var("GPUSWAP_REAL_LIBCUDA").unwrap_or_else(|_| "libcuda.so.1".into())
}

/// Ends the process: the driver has no function `name`, which the interposer cannot do
/// without.
pub fn missing(name: &CStr) -> ! {
    let unloaded = if real_library().is_none() {
        " (it could not be loaded)"
    } else {
        ""
    };
    diag::die(&format!(
        "the CUDA driver library {} has no {}{unloaded}",
        library_name(),
        name.to_string_lossy()
    ))
}

/// The real driver's function `name`, or 0 (no such function, or no driver).
pub fn real_symbol(name: &CStr) -> usize {
    let Some(lib) = real_library() else { return 0 };
    let dlsym = real_dlsym();
    // SAFETY: a live handle and a NUL-terminated name.
    unsafe { dlsym(lib as *mut c_void, name.as_ptr()) as usize }
}

/// Resolves the real function `$name` once and casts it to its type.
macro_rules! real {
    ($name:expr ; fn($($arg:ty),*) -> $ret:ty) => {{
        static ADDR: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let addr = *ADDR.get_or_init(|| $crate::ffi::real_symbol($name));
        if addr == 0 {
            $crate::ffi::missing($name);
        }
        // SAFETY: the driver exports `$name` with this signature (cuda.h).
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*) -> $ret>(addr) }
    }};
}
pub(crate) use real;

/// The driver's function `name` cast to `F`, or `None` where the driver has none (a
/// feature the interposer can do without).
///
/// # Safety
/// `F` is the function pointer type of `name` in cuda.h.
unsafe fn optional<F: Copy>(name: &CStr) -> Option<F> {
    let addr = real_symbol(name);
    // SAFETY: a function pointer is an address (`F` is one: the caller's contract).
    (addr != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&addr) })
}

fn check(rc: CuResult, what: &str) -> Result<(), String> {
    if rc == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed with CUDA error {rc}"))
    }
}

/// The driver calls the interposer makes itself, each a safe function returning the
/// driver's error as text.
pub mod driver {
    use super::*;

    pub fn current_context() -> Handle {
        let f = real!(c"cuCtxGetCurrent"; fn(*mut Handle) -> CuResult);
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: `ctx` is valid for a write.
        let rc = unsafe { f(&mut ctx) };
        if rc == CUDA_SUCCESS {
            ctx
        } else {
            std::ptr::null_mut()
        }
    }

    /// The current context's device, if there is one.
    pub fn current_device() -> Option<c_int> {
        let f = real!(c"cuCtxGetDevice"; fn(*mut c_int) -> CuResult);
        let mut device: c_int = -1;
        // SAFETY: `device` is valid for a write.
        (unsafe { f(&mut device) } == CUDA_SUCCESS).then_some(device)
    }

    pub fn set_context(ctx: Handle) -> Result<(), String> {
        let f = real!(c"cuCtxSetCurrent"; fn(Handle) -> CuResult);
        // SAFETY: a context the program created; the driver checks it.
        check(unsafe { f(ctx) }, "cuCtxSetCurrent")
    }

    pub fn synchronize_stream(stream: Handle) -> Result<(), String> {
        let f = real!(c"cuStreamSynchronize"; fn(Handle) -> CuResult);
        // SAFETY: the program's stream; the driver checks it.
        check(unsafe { f(stream) }, "cuStreamSynchronize")
    }

    pub fn synchronize() -> Result<(), String> {
        let f = real!(c"cuCtxSynchronize"; fn() -> CuResult);
        // SAFETY: no arguments.
        check(unsafe { f() }, "cuCtxSynchronize")
    }

    /// The device's free and total memory as the driver itself reports them.
    pub fn memory_info() -> Option<(u64, u64)> {
        let f = real!(c"cuMemGetInfo_v2"; fn(*mut usize, *mut usize) -> CuResult);
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both pointers are valid for a write.
        (unsafe { f(&mut free, &mut total) } == CUDA_SUCCESS).then_some((free as u64, total as u64))
    }

    /// Device `device`'s memory (an ordinal).
    pub fn total_memory(device: c_int) -> Result<u64, String> {
        let f = real!(c"cuDeviceTotalMem_v2"; fn(*mut usize, c_int) -> CuResult);
        let mut bytes = 0usize;
        // SAFETY: `bytes` is valid for a write; the driver checks the ordinal.
        check(unsafe { f(&mut bytes, device) }, "cuDeviceTotalMem")?;
        Ok(bytes as u64)
    }

    /// The device the interposer's own memory goes to: the current context's (the
    /// buffer's, made current before any of its memory is made or mapped), else 0.
    pub fn this_device() -> c_int {
        current_device().unwrap_or(0)
    }

    /// Pinned memory at `location` (`device`: the device of a device location; NUMA
    /// node 0 for `HOST_NUMA`; ignored for plain host memory).
    fn prop(location: c_int, device: c_int) -> AllocationProp {
        AllocationProp {
            kind: ALLOCATION_PINNED,
            requested_handle_types: 0,
            location: MemLocation {
                kind: location,
                id: if location == LOCATION_DEVICE {
                    device
                } else {
                    0
                },
            },
            win32_handle_meta_data: std::ptr::null_mut(),
            alloc_flags: [0; 8],
        }
    }

    /// Device `device`'s allocation granularity.
    pub fn granularity(device: c_int) -> Result<u64, String> {
        let f = real!(c"cuMemGetAllocationGranularity"; fn(*mut usize, *const AllocationProp, c_int) -> CuResult);
        let mut bytes = 0usize;
        let p = prop(LOCATION_DEVICE, device);
        // SAFETY: valid pointers; option 0 is CU_MEM_ALLOC_GRANULARITY_MINIMUM.
        check(
            unsafe { f(&mut bytes, &p, 0) },
            "cuMemGetAllocationGranularity",
        )?;
        Ok(bytes as u64)
    }

    /// Physical memory of `bytes` in the current context's device's VRAM
    /// (`LOCATION_DEVICE`) or host memory
    /// (`LOCATION_HOST`). Drivers that refuse plain host memory for `cuMemCreate` get
    /// NUMA node 0's (`HOST_NUMA`), and that choice is kept.
    pub fn create(bytes: u64, location: c_int) -> Result<u64, CuResult> {
        static HOST_KIND: std::sync::atomic::AtomicI32 =
            std::sync::atomic::AtomicI32::new(LOCATION_HOST);
        let f = real!(c"cuMemCreate"; fn(*mut u64, usize, *const AllocationProp, u64) -> CuResult);
        let device = this_device();
        let attempt = |kind: c_int| {
            let mut handle = 0u64;
            let p = prop(kind, device);
            // SAFETY: valid pointers; flags must be 0.
            match unsafe { f(&mut handle, bytes as usize, &p, 0) } {
                CUDA_SUCCESS => Ok(handle),
                rc => Err(rc),
            }
        };
        if location != LOCATION_HOST {
            return attempt(location);
        }
        let kind = HOST_KIND.load(std::sync::atomic::Ordering::Relaxed);
        match attempt(kind) {
            Err(rc) if kind == LOCATION_HOST && rc != CUDA_ERROR_OUT_OF_MEMORY => {
                let handle = attempt(LOCATION_HOST_NUMA)?;
                HOST_KIND.store(LOCATION_HOST_NUMA, std::sync::atomic::Ordering::Relaxed);
                diag::trace_note("host memory comes from NUMA node 0 (HOST_NUMA)");
                Ok(handle)
            }
            other => other,
        }
    }

    pub fn release(handle: u64) -> Result<(), String> {
        let f = real!(c"cuMemRelease"; fn(u64) -> CuResult);
        // SAFETY: a handle from `create`, released once.
        check(unsafe { f(handle) }, "cuMemRelease")
    }

    pub fn reserve(bytes: u64, align: u64) -> Result<DevPtr, String> {
        let f =
            real!(c"cuMemAddressReserve"; fn(*mut DevPtr, usize, usize, DevPtr, u64) -> CuResult);
        let mut va = 0;
        // SAFETY: `va` is valid for a write.
        check(
            unsafe { f(&mut va, bytes as usize, align as usize, 0, 0) },
            "cuMemAddressReserve",
        )?;
        Ok(va)
    }

    pub fn unreserve(va: DevPtr, bytes: u64) -> Result<(), String> {
        let f = real!(c"cuMemAddressFree"; fn(DevPtr, usize) -> CuResult);
        // SAFETY: a range from `reserve` with nothing mapped in it.
        check(unsafe { f(va, bytes as usize) }, "cuMemAddressFree")
    }

    /// Maps `handle` at `va` and lets the device read and write it.
    pub fn map(va: DevPtr, bytes: u64, handle: u64) -> Result<(), String> {
        map_only(va, bytes, handle)?;
        set_access(va, bytes).inspect_err(|_| {
            let _ = unmap(va, bytes);
        })
    }

    /// Maps `handle` at `va`, without access yet ([`set_access`]).
    pub fn map_only(va: DevPtr, bytes: u64, handle: u64) -> Result<(), String> {
        let map = real!(c"cuMemMap"; fn(DevPtr, usize, usize, u64, u64) -> CuResult);
        // SAFETY: `va` lies in a reservation of ours, unmapped; `handle` is live.
        check(unsafe { map(va, bytes as usize, 0, handle, 0) }, "cuMemMap")
    }

    /// Lets the current context's device read and write `[va, va + bytes)`, mapped (it
    /// may span adjacent mappings of one reservation, as PyTorch's expandable segments
    /// grant it).
    pub fn set_access(va: DevPtr, bytes: u64) -> Result<(), String> {
        let access =
            real!(c"cuMemSetAccess"; fn(DevPtr, usize, *const AccessDesc, usize) -> CuResult);
        let desc = AccessDesc {
            location: MemLocation {
                kind: LOCATION_DEVICE,
                id: this_device(),
            },
            flags: ACCESS_READWRITE,
        };
        // SAFETY: one valid descriptor for a mapped range of ours.
        check(
            unsafe { access(va, bytes as usize, &desc, 1) },
            "cuMemSetAccess",
        )
    }

    pub fn unmap(va: DevPtr, bytes: u64) -> Result<(), String> {
        let f = real!(c"cuMemUnmap"; fn(DevPtr, usize) -> CuResult);
        // SAFETY: a mapped range of ours.
        check(unsafe { f(va, bytes as usize) }, "cuMemUnmap")
    }

    /// A stream of the current context that does not wait for the legacy default
    /// stream (`CU_STREAM_NON_BLOCKING`): the interposer's moves never queue behind the
    /// program's work.
    pub fn stream_create() -> Result<Handle, String> {
        let f = real!(c"cuStreamCreate"; fn(*mut Handle, std::ffi::c_uint) -> CuResult);
        let mut stream: Handle = std::ptr::null_mut();
        // SAFETY: `stream` is valid for a write; 1 is CU_STREAM_NON_BLOCKING.
        check(unsafe { f(&mut stream, 1) }, "cuStreamCreate")?;
        Ok(stream)
    }

    /// The driver's events and capture query, for the progress reports' completions;
    /// `None` where the driver lacks one of them.
    pub fn events() -> Option<&'static Events> {
        static EVENTS: OnceLock<Option<Events>> = OnceLock::new();
        EVENTS
            .get_or_init(|| {
                // SAFETY: each name's type as in cuda.h.
                unsafe {
                    Some(Events {
                        create: optional(c"cuEventCreate")?,
                        record: optional(c"cuEventRecord")?,
                        query: optional(c"cuEventQuery")?,
                        destroy: optional(c"cuEventDestroy_v2")?,
                        is_capturing: optional(c"cuStreamIsCapturing")?,
                    })
                }
            })
            .as_ref()
    }

    /// The entry points of [`events`].
    pub struct Events {
        create: unsafe extern "C" fn(*mut Handle, std::ffi::c_uint) -> CuResult,
        record: unsafe extern "C" fn(Handle, Handle) -> CuResult,
        query: unsafe extern "C" fn(Handle) -> CuResult,
        destroy: unsafe extern "C" fn(Handle) -> CuResult,
        is_capturing: unsafe extern "C" fn(Handle, *mut c_int) -> CuResult,
    }

    impl Events {
        /// An event of the current context that keeps no timing
        /// (`CU_EVENT_DISABLE_TIMING`: the cheapest to record and query).
        pub fn create(&self) -> Option<Handle> {
            let mut event: Handle = std::ptr::null_mut();
            // SAFETY: `event` is valid for a write; 2 is CU_EVENT_DISABLE_TIMING.
            (unsafe { (self.create)(&mut event, 2) } == CUDA_SUCCESS).then_some(event)
        }

        /// Records `event` on `stream` (the program's, or 0 for the legacy default
        /// stream of the current context).
        pub fn record(&self, event: Handle, stream: Handle) -> bool {
            // SAFETY: an event of ours; the driver checks the stream.
            unsafe { (self.record)(event, stream) == CUDA_SUCCESS }
        }

        /// `CUDA_SUCCESS` once the work before the event is done, `CUDA_ERROR_NOT_READY`
        /// before, another error if it cannot tell.
        pub fn query(&self, event: Handle) -> CuResult {
            // SAFETY: an event of ours.
            unsafe { (self.query)(event) }
        }

        pub fn destroy(&self, event: Handle) {
            // SAFETY: an event of ours, destroyed once.
            unsafe { (self.destroy)(event) };
        }

        /// Whether `stream` is being captured into a graph (or the driver cannot say:
        /// then it is left alone as if it were).
        pub fn capturing(&self, stream: Handle) -> bool {
            let mut status: c_int = 0;
            // SAFETY: `status` is valid for a write; the driver checks the stream.
            let rc = unsafe { (self.is_capturing)(stream, &mut status) };
            rc != CUDA_SUCCESS || status != 0
        }
    }

    /// Parameter `index` of kernel `func`: its (offset, size) in bytes
    /// (`cuFuncGetParamInfo`, CUDA 12.4+; `cuKernelGetParamInfo` where `func` is a
    /// `CUkernel`, which a CUDA 12 runtime may launch as a function); `None` past the
    /// last parameter or where the driver does not say.
    pub fn param_info(func: Handle, index: usize) -> Option<(usize, usize)> {
        type ParamInfo = unsafe extern "C" fn(Handle, usize, *mut usize, *mut usize) -> CuResult;
        static INFO: OnceLock<[Option<ParamInfo>; 2]> = OnceLock::new();
        // SAFETY: cuda.h's type of both functions.
        let info = INFO.get_or_init(|| unsafe {
            [
                optional(c"cuFuncGetParamInfo"),
                optional(c"cuKernelGetParamInfo"),
            ]
        });
        info.iter().flatten().find_map(|f| {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: both are valid for a write; the driver checks the handle and index.
            (unsafe { f(func, index, &mut offset, &mut size) } == CUDA_SUCCESS)
                .then_some((offset, size))
        })
    }

    /// Queues a copy between device addresses on `stream`; it is done once the stream is
    /// synchronized.
    pub fn copy_async(dst: DevPtr, src: DevPtr, bytes: u64, stream: Handle) -> Result<(), String> {
        let f = real!(c"cuMemcpyDtoDAsync_v2"; fn(DevPtr, DevPtr, usize, Handle) -> CuResult);
        // SAFETY: both ranges are mapped and accessible and stay so until the stream is
        // synchronized, and no kernel of the process runs (it is suspended and drained).
        check(
            unsafe { f(dst, src, bytes as usize, stream) },
            "cuMemcpyDtoDAsync",
        )
    }

    /// Loads `image` (PTX, compiled by the driver) as a module of the current context;
    /// returns the module and its kernel `name`.
    pub fn load_kernel(image: &CStr, name: &CStr) -> Result<(Handle, Handle), String> {
        let load = real!(c"cuModuleLoadData"; fn(*mut Handle, *const c_void) -> CuResult);
        let get = real!(c"cuModuleGetFunction"; fn(*mut Handle, Handle, *const c_char) -> CuResult);
        let mut module: Handle = std::ptr::null_mut();
        // SAFETY: `module` is valid for a write; `image` is NUL-terminated text.
        check(
            unsafe { load(&mut module, image.as_ptr().cast()) },
            "cuModuleLoadData",
        )?;
        let mut func: Handle = std::ptr::null_mut();
        // SAFETY: `func` is valid for a write; `module` was just loaded.
        check(
            unsafe { get(&mut func, module, name.as_ptr()) },
            "cuModuleGetFunction",
        )
        .inspect_err(|_| {
            let _ = unload(module);
        })?;
        Ok((module, func))
    }

    pub fn unload(module: Handle) -> Result<(), String> {
        let f = real!(c"cuModuleUnload"; fn(Handle) -> CuResult);
        // SAFETY: a module from `load_kernel`, unloaded once.
        check(unsafe { f(module) }, "cuModuleUnload")
    }

    /// The current context's device's multiprocessors.
    pub fn multiprocessors() -> Result<u32, String> {
        let f = real!(c"cuDeviceGetAttribute"; fn(*mut c_int, c_int, c_int) -> CuResult);
        let device = current_device().ok_or("no current context")?;
        let mut count: c_int = 0;
        // SAFETY: `count` is valid for a write; 16 is
        // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT.
        check(unsafe { f(&mut count, 16, device) }, "cuDeviceGetAttribute")?;
        Ok(count.max(1) as u32)
    }

    /// Launches `func` on a one-dimensional grid of `blocks` blocks of `threads` on
    /// `stream`, its parameters each a pointer to the value.
    pub fn launch(
        func: Handle,
        blocks: u32,
        threads: u32,
        stream: Handle,
        params: &mut [*mut c_void],
    ) -> Result<(), String> {
        let f = real!(c"cuLaunchKernel"; fn(Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle, *mut *mut c_void, *mut *mut c_void) -> CuResult);
        // SAFETY: `params` holds one valid pointer per parameter of `func`, read during
        // the call; no shared memory, no extra.
        check(
            unsafe {
                f(
                    func,
                    blocks,
                    1,
                    1,
                    threads,
                    1,
                    1,
                    0,
                    stream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel",
        )
    }

    /// The UUID of the process's device of ordinal `ordinal` (0: the first that
    /// `CUDA_VISIBLE_DEVICES` leaves), if the driver tells it.
    pub fn device_uuid(ordinal: c_int) -> Option<[u8; 16]> {
        type GetUuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> CuResult;
        let get = real!(c"cuDeviceGet"; fn(*mut c_int, c_int) -> CuResult);
        let mut device: c_int = 0;
        // SAFETY: `device` is valid for a write; the driver checks the ordinal.
        if unsafe { get(&mut device, ordinal) } != CUDA_SUCCESS {
            return None;
        }
        // SAFETY: both have cuda.h's signature `CUresult (CUuuid *, CUdevice)`.
        let uuid = unsafe { optional::<GetUuid>(c"cuDeviceGetUuid_v2") }
            .or_else(|| unsafe { optional::<GetUuid>(c"cuDeviceGetUuid") })?;
        let mut bytes = [0u8; 16];
        // SAFETY: `bytes` is a CUuuid (16 bytes), valid for a write.
        (unsafe { uuid(&mut bytes, device) } == CUDA_SUCCESS).then_some(bytes)
    }

    pub fn stream_destroy(stream: Handle) -> Result<(), String> {
        let f = real!(c"cuStreamDestroy_v2"; fn(Handle) -> CuResult);
        // SAFETY: a stream from `stream_create`, destroyed once.
        check(unsafe { f(stream) }, "cuStreamDestroy")
    }

    /// New memory of `bytes` of the kind `like` is (its location, as the driver says
    /// of it), exportable as a POSIX file descriptor ([`export_fd`]): `cuMemCreate`
    /// fixes the types a handle exports at its creation.
    pub fn create_exportable(like: u64, bytes: u64) -> Result<u64, String> {
        let props = real!(c"cuMemGetAllocationPropertiesFromHandle"; fn(*mut AllocationProp, u64) -> CuResult);
        let create =
            real!(c"cuMemCreate"; fn(*mut u64, usize, *const AllocationProp, u64) -> CuResult);
        // Filled in by the driver below.
        let mut p = prop(LOCATION_DEVICE, 0);
        // SAFETY: `p` is valid for a write; `like` is a live handle of ours.
        check(
            unsafe { props(&mut p, like) },
            "cuMemGetAllocationPropertiesFromHandle",
        )?;
        p.requested_handle_types = HANDLE_TYPE_POSIX_FD;
        let mut handle = 0u64;
        // SAFETY: valid pointers; flags must be 0.
        check(
            unsafe { create(&mut handle, bytes as usize, &p, 0) },
            "cuMemCreate of exportable memory",
        )?;
        Ok(handle)
    }

    /// A file descriptor of `handle`'s memory (made by [`create_exportable`]) for
    /// another process to import; closed when dropped.
    pub fn export_fd(handle: u64) -> Result<std::os::fd::OwnedFd, String> {
        let f = real!(c"cuMemExportToShareableHandle"; fn(*mut c_int, u64, c_int, u64) -> CuResult);
        let mut fd: c_int = -1;
        // SAFETY: `fd` is valid for the int a POSIX descriptor export writes.
        check(
            unsafe { f(&mut fd, handle, HANDLE_TYPE_POSIX_FD, 0) },
            "cuMemExportToShareableHandle",
        )?;
        // SAFETY: the driver made the descriptor for the caller, who owns it.
        Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    }

    /// A handle of the memory another process exported as `fd` (the descriptor stays
    /// the caller's to close); the driver's error as its code.
    pub fn import_fd(fd: std::os::fd::BorrowedFd<'_>) -> Result<u64, CuResult> {
        use std::os::fd::AsRawFd;
        let f =
            real!(c"cuMemImportFromShareableHandle"; fn(*mut u64, *mut c_void, c_int) -> CuResult);
        let mut handle = 0u64;
        // SAFETY: `handle` is valid for a write; a POSIX descriptor is passed as the
        // pointer's value, as cuda.h says of that type.
        let rc = unsafe {
            f(
                &mut handle,
                fd.as_raw_fd() as usize as *mut c_void,
                HANDLE_TYPE_POSIX_FD,
            )
        };
        if rc == CUDA_SUCCESS {
            Ok(handle)
        } else {
            Err(rc)
        }
    }

    /// Maps `handle` (of `bytes`) at a range of its own, readable and writable by the
    /// device: a window that copies reach it through.
    pub fn map_window(handle: u64, bytes: u64) -> Result<DevPtr, String> {
        let window = reserve(bytes, 0)?;
        map(window, bytes, handle)
            .map(|()| window)
            .inspect_err(|_| {
                let _ = unreserve(window, bytes);
            })
    }

    /// Unmaps a window of [`map_window`] and gives its range back.
    pub fn unmap_window(window: DevPtr, bytes: u64) -> Result<(), String> {
        unmap(window, bytes).and(unreserve(window, bytes))
    }
}

/// `CUDA_ERROR_INVALID_HANDLE`: a handle the driver (or `vmm`) does not know.
pub const CUDA_ERROR_INVALID_HANDLE: CuResult = 400;
/// `CUDA_ERROR_MAP_FAILED`: an IPC import that could not be mapped.
pub const CUDA_ERROR_MAP_FAILED: CuResult = 205;

/// `CUmemAllocationProp` as a program gave it to `cuMemCreate`, kept by value for
/// `cuMemGetAllocationPropertiesFromHandle` (its Win32 pointer kept as an integer, never
/// followed).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProgramProp {
    pub kind: c_int,
    pub requested_handle_types: c_int,
    pub location: MemLocation,
    pub win32_handle_meta_data: u64,
    pub alloc_flags: [u8; 8],
}

// cuda.h's layout: 32 bytes, the location at 8, the flags at 24.
const _: () = assert!(std::mem::size_of::<ProgramProp>() == 32);
const _: () = assert!(std::mem::offset_of!(ProgramProp, alloc_flags) == 24);

impl ProgramProp {
    /// The device of pinned device memory, the only kind the interposer manages.
    pub fn device(&self) -> Option<c_int> {
        (self.kind == ALLOCATION_PINNED && self.location.kind == LOCATION_DEVICE)
            .then_some(self.location.id)
    }
}

/// A program's `CUmemAccessDesc` list for a range, kept to grant it again where a move
/// remaps the range: each (location type, location id, flags), as cuda.h lays it out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access(Vec<[c_int; 3]>);

impl Access {
    /// The `count` descriptors at `desc`.
    ///
    /// # Safety
    /// `desc` points at `count` `CUmemAccessDesc`s (the driver accepted them).
    pub unsafe fn copied(desc: *const c_void, count: usize) -> Self {
        if desc.is_null() {
            return Self::default();
        }
        // SAFETY: the caller's contract; `[c_int; 3]` is `CUmemAccessDesc`'s layout.
        Self(unsafe { std::slice::from_raw_parts(desc.cast::<[c_int; 3]>(), count) }.to_vec())
    }
}

/// The driver calls behind a program's own mappings (`vmm`), each answering the
/// driver's error code.
pub mod vmm_driver {
    use super::*;

    fn code(rc: CuResult) -> Result<(), CuResult> {
        if rc == CUDA_SUCCESS { Ok(()) } else { Err(rc) }
    }

    /// Maps `bytes` of `handle` from `offset` at `va`, without access yet.
    pub fn map_part(va: DevPtr, bytes: u64, offset: u64, handle: u64) -> Result<(), CuResult> {
        let map = real!(c"cuMemMap"; fn(DevPtr, usize, usize, u64, u64) -> CuResult);
        // SAFETY: `va` lies in the program's reservation, `handle` is a live one of ours;
        // the driver checks both.
        code(unsafe { map(va, bytes as usize, offset as usize, handle, 0) })
    }

    /// Grants the program's `access` on `[va, va + bytes)` again.
    pub fn grant(va: DevPtr, bytes: u64, access: &Access) -> Result<(), CuResult> {
        let f = real!(c"cuMemSetAccess"; fn(DevPtr, usize, *const [c_int; 3], usize) -> CuResult);
        // SAFETY: `access` holds `len` descriptors of cuda.h's layout.
        code(unsafe { f(va, bytes as usize, access.0.as_ptr(), access.0.len()) })
    }

    /// Unmaps `[va, va + bytes)`, whole mappings.
    pub fn unmap(va: DevPtr, bytes: u64) -> Result<(), CuResult> {
        let f = real!(c"cuMemUnmap"; fn(DevPtr, usize) -> CuResult);
        // SAFETY: the driver checks the range.
        code(unsafe { f(va, bytes as usize) })
    }
}
