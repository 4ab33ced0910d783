//! The allocator setting CPU inference wants: large buffers reused, not mapped afresh.

/// Largest buffer glibc's allocator serves from its heap after
/// `reuse_large_buffers` (larger ones are mapped on their own).
const HEAP_BUFFER_MAX: usize = 256 << 20;
/// Freed memory at the heap's top that glibc keeps after `reuse_large_buffers`
/// before it returns any to the system.
const KEPT_FREE_MAX: usize = 512 << 20;

/// Ask glibc's allocator to serve buffers up to 256 MiB from its heap and to keep up
/// to 512 MiB of freed memory, instead of mapping each large buffer afresh and
/// unmapping it when freed.
///
/// A prefill allocates buffers of tens of MiB in every layer (a 1.5B model's fused gate
/// and up projections at 512 rows: 37 MiB, above the 32 MiB ceiling of glibc's own
/// adaptive threshold), and the kernel faults in and zeroes each fresh mapping page by
/// page: on a 2-core Zen 3, about 500k page faults in a 512-token F16 prefill of a 1.5B
/// model, about a sixth of its time (`docs/performance.md`). The cost is memory: up to
/// 512 MiB of freed buffers stays with the process for the next request.
///
/// Process-wide: call it once at start-up, before loading a model (the `toolgate`
/// binary and `benches/speed.rs` do; an embedding program chooses). Cost: two
/// `mallopt` calls. Returns whether glibc took both settings: always `false` off
/// Linux with glibc (musl, macOS, Windows), where it does nothing.
///
/// # Example
/// ```
/// let taken = toolgate::kernels::reuse_large_buffers();
/// assert!(taken || !cfg!(all(target_os = "linux", target_env = "gnu")));
/// ```
pub fn reuse_large_buffers() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let limit = |v: usize| libc::c_int::try_from(v).unwrap_or(libc::c_int::MAX);
        // SAFETY: `mallopt` takes a parameter number and a value and touches only the
        // allocator's settings; both numbers are glibc's documented parameters.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, limit(HEAP_BUFFER_MAX)) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, limit(KEPT_FREE_MAX)) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
