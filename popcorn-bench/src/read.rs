//! The read floor: a streaming read of a device tensor, the fastest way found to read memory
//! (16-byte loads, four in flight a thread, eight blocks of 512 threads per multiprocessor),
//! timed on the very buffer a step reads (K), so the floor is the bytes of that buffer over
//! the rate the device reads them at. It reads faster than popcorn's own `sum` over a smaller
//! buffer, the bench's read ceiling (BENCHMARKS.md, run 52).

use popcorn::{Context, RuntimeError, Tensor};
use popcorn_runtime::cuda::raw::{KernelArg, RawCuda, RawKernel};

/// Reads an array with 16-byte loads and (almost) never writes: the bandwidth of reading alone.
const READ_ALL: &str = r#"
extern "C" __global__ void pk_bench_read_all(const long long len4, const float4* __restrict__ in, float* __restrict__ out)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    float acc = 0.0f;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < len4; i += 4 * stride) {
        const float4 a = in[i], b = in[i + stride], c = in[i + 2 * stride], d = in[i + 3 * stride];
        acc += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w + c.x + c.y + c.z + c.w + d.x + d.y + d.z + d.w;
    }
    for (; i < len4; i += stride) {
        const float4 a = in[i];
        acc += a.x + a.y + a.z + a.w;
    }
    if (acc == -1.0f) {
        out[0] = acc;
    }
}
"#;

/// Blocks per multiprocessor of the read.
const BLOCKS_PER_SM: u32 = 8;
/// Threads per block of the read.
const THREADS: u32 = 512;

/// The device address and size in bytes of a tensor's first buffer on the GPU.
pub fn device_buffer(t: &Tensor) -> Result<(u64, usize), RuntimeError> {
    t.cuda_buffers()
        .and_then(|b| b.first())
        .map(|b| (b.device_ptr(), b.size_bytes()))
        .ok_or_else(|| RuntimeError::Device("the tensor is not on the GPU".into()))
}

/// The streaming read, compiled once.
pub struct StreamingRead<'a> {
    raw: RawCuda<'a>,
    kernel: RawKernel,
    /// The one float the kernel may write, and its address.
    _scratch: Tensor,
    out: u64,
}

impl<'a> StreamingRead<'a> {
    /// Compiles the read for the GPU context `ctx` through its raw API `raw`.
    pub fn new(ctx: &Context, raw: RawCuda<'a>) -> Result<StreamingRead<'a>, RuntimeError> {
        let kernel = raw.kernel("pk_bench_read_all", || READ_ALL.to_string())?;
        let scratch = ctx.col(&[0.0])?;
        let (out, _) = device_buffer(&scratch)?;
        Ok(StreamingRead {
            raw,
            kernel,
            _scratch: scratch,
            out,
        })
    }

    /// Queues one read of the `bytes` bytes at `ptr` (its 16-byte words; at most 15 bytes at
    /// the end are not read).
    fn launch(&self, ptr: u64, bytes: usize) -> Result<(), RuntimeError> {
        let blocks = self.raw.multiprocessors() * BLOCKS_PER_SM;
        let mut args = [
            KernelArg::size(bytes / 16)?,
            KernelArg::Ptr(ptr),
            KernelArg::Ptr(self.out),
        ];
        // SAFETY: the read kernel takes (len4, float4*, float*): it reads `bytes / 16` float4s
        // from `ptr`, inside the buffer of `bytes` bytes there (every caller passes one of
        // device_buffer's), and writes at most one float to the scratch, which `self` holds.
        unsafe {
            self.raw.launch(
                &self.kernel,
                ((blocks, 1, 1), (THREADS, 1, 1), 0),
                &mut args,
            )
        }
    }

    /// Milliseconds of `reps` reads of the whole first buffer of `t` (CUDA events; only the
    /// launch between them), after two warm-ups, and the bytes read.
    pub fn time_ms(
        &self,
        ctx: &Context,
        t: &Tensor,
        reps: usize,
    ) -> Result<(Vec<f64>, usize), RuntimeError> {
        let (ptr, bytes) = device_buffer(t)?;
        self.launch(ptr, bytes)?;
        self.launch(ptr, bytes)?;
        let ms = (0..reps.max(1))
            .map(|_| ctx.time(|| self.launch(ptr, bytes)).map(|((), ms)| ms))
            .collect::<Result<_, _>>()?;
        Ok((ms, bytes))
    }
}
