//! The front end: source text to checked programs, parsing ([`crate::parse`]) and then
//! checking ([`crate::check`]), with errors located by line and column.

use crate::diag::LocatedError;
use crate::program::Program;

impl Program {
    /// Parses and checks source text that holds exactly one program.
    ///
    /// ```
    /// let p = popcorn_dsl::Program::parse(
    ///     "fn scale(X: Dense[n, d], a: Scalar) -> (Y: Dense[n, d]) { Y = a * X; }",
    /// ).unwrap();
    /// assert_eq!(p.name, "scale");
    /// assert_eq!(p.outputs[0].ty.to_string(), "Dense[n, d]");
    /// ```
    pub fn parse(source: &str) -> Result<Program, LocatedError> {
        let mut all = Program::parse_all(source)?;
        if all.len() != 1 {
            return Err(LocatedError {
                line: 1,
                column: 1,
                width: 1,
                message: format!("expected exactly one program, found {}", all.len()),
                help: Some("use Program::parse_all for a file with several programs".into()),
                line_text: source.lines().next().unwrap_or("").to_string(),
            });
        }
        Ok(all.remove(0))
    }

    /// Parses and checks every program of a source text (a `.pop` file).
    pub fn parse_all(source: &str) -> Result<Vec<Program>, LocatedError> {
        let module = crate::parse::parse_str(source).map_err(|d| d.locate(source))?;
        crate::check::check_module(&module, source).map_err(|d| d.locate(source))
    }
}
