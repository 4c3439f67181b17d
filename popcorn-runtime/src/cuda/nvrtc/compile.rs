//! Compiling CUDA C with NVRTC: to a CUBIN for the device, or to PTX for dumps.

use crate::error::RuntimeError;
use cudarc::nvrtc::{result as nvrtc, sys};
use std::ffi::{c_char, CString};

/// NVRTC's version, `(major, minor)`.
pub(crate) fn version() -> Result<(i32, i32), RuntimeError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: both pointers refer to live `i32`s that NVRTC writes.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| nvrtc_error("nvrtcVersion", e))?;
    Ok((major, minor))
}

/// The options popcorn compiles with for architecture `arch` (`sm_90` or `compute_90`).
pub(crate) fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
    ]
}

/// What to get from a compiled program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// Machine code for a real architecture (`sm_XY`).
    Cubin,
    /// PTX text (for a virtual architecture, `compute_XY`).
    Ptx,
}

/// An NVRTC program, destroyed on drop.
struct Program {
    raw: sys::nvrtcProgram,
    /// The source and name must outlive the program.
    _source: CString,
    _name: CString,
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by `nvrtcCreateProgram` and is destroyed exactly once.
        let _ = unsafe { nvrtc::destroy_program(self.raw) };
    }
}

/// Compiles `source` (kernel `name`) with `options` and returns the requested output.
/// A source that does not compile gives [`RuntimeError::Compile`] with NVRTC's log.
pub(crate) fn compile(
    name: &str,
    source: &str,
    options: &[String],
    output: Output,
) -> Result<Vec<u8>, RuntimeError> {
    let c_source = CString::new(source).map_err(|_| RuntimeError::Compile {
        name: name.to_string(),
        log: "the source contains a NUL character".to_string(),
        numbered_source: numbered(source),
    })?;
    let c_name = CString::new(format!("{}.cu", sanitize(name))).unwrap_or_default();
    let raw = nvrtc::create_program(&c_source, Some(&c_name))
        .map_err(|e| nvrtc_error("nvrtcCreateProgram", e))?;
    let program = Program {
        raw,
        _source: c_source,
        _name: c_name,
    };
    // SAFETY: `program.raw` is a live program; the options contain no NUL characters (they
    // are built by `options` from an architecture name of letters, digits and `_`).
    let compiled = unsafe { nvrtc::compile_program(program.raw, options) };
    match compiled {
        Ok(()) => {}
        Err(e) if e.0 == sys::nvrtcResult::NVRTC_ERROR_COMPILATION => {
            return Err(RuntimeError::Compile {
                name: name.to_string(),
                log: program_log(&program).unwrap_or_else(|| "(NVRTC gave no log)".to_string()),
                numbered_source: numbered(source),
            });
        }
        Err(e) => return Err(nvrtc_error("nvrtcCompileProgram", e)),
    }
    match output {
        Output::Cubin => {
            let mut size = 0usize;
            // SAFETY: the program compiled; `size` is a live `usize`.
            unsafe { sys::nvrtcGetCUBINSize(program.raw, &mut size) }
                .result()
                .map_err(|e| nvrtc_error("nvrtcGetCUBINSize", e))?;
            let mut image = vec![0u8; size];
            // SAFETY: `image` has exactly the size NVRTC reported for the CUBIN.
            unsafe { sys::nvrtcGetCUBIN(program.raw, image.as_mut_ptr() as *mut c_char) }
                .result()
                .map_err(|e| nvrtc_error("nvrtcGetCUBIN", e))?;
            Ok(image)
        }
        Output::Ptx => {
            // SAFETY: the program compiled and is live.
            let ptx = unsafe { nvrtc::get_ptx(program.raw) }
                .map_err(|e| nvrtc_error("nvrtcGetPTX", e))?;
            let mut bytes: Vec<u8> = ptx.into_iter().map(|c| c as u8).collect();
            while bytes.last() == Some(&0) {
                bytes.pop();
            }
            Ok(bytes)
        }
    }
}

/// NVRTC's log for a program, if any.
fn program_log(program: &Program) -> Option<String> {
    // SAFETY: the program is live.
    let log = unsafe { nvrtc::get_program_log(program.raw) }.ok()?;
    let bytes: Vec<u8> = log
        .into_iter()
        .take_while(|c| *c != 0)
        .map(|c| c as u8)
        .collect();
    let text = String::from_utf8_lossy(&bytes).trim_end().to_string();
    (!text.is_empty()).then_some(text)
}

/// An NVRTC failure other than a compile error.
fn nvrtc_error(call: &str, e: nvrtc::NvrtcError) -> RuntimeError {
    RuntimeError::Nvrtc {
        call: call.to_string(),
        source: e,
    }
}

/// The source with 1-based line numbers, for compile errors.
pub(crate) fn numbered(source: &str) -> String {
    let width = source.lines().count().max(1).to_string().len();
    source
        .lines()
        .enumerate()
        .map(|(i, line)| format!("{:>width$} | {line}\n", i + 1))
        .collect()
}

/// `name` reduced to characters safe in file names (at most 80 of them).
pub(crate) fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    if s.is_empty() {
        "kernel".to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_source_pads_line_numbers() {
        let src = (1..=10)
            .map(|i| format!("line{i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let n = numbered(&src);
        assert!(n.starts_with(" 1 | line1\n"));
        assert!(n.contains("10 | line10\n"));
        assert_eq!(numbered("x"), "1 | x\n");
    }

    #[test]
    fn sanitized_names_are_file_safe() {
        assert_eq!(sanitize("pk_0123abcd"), "pk_0123abcd");
        assert_eq!(sanitize("a/b c.d"), "a_b_c_d");
        assert_eq!(sanitize(""), "kernel");
        assert_eq!(sanitize(&"x".repeat(200)).len(), 80);
    }

    #[test]
    fn options_name_the_architecture() {
        let o = options("sm_90");
        assert_eq!(o[0], "--gpu-architecture=sm_90");
        assert!(o.iter().all(|s| !s.contains('\0')));
    }
}
