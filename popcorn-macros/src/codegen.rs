//! The module generated for one program.

use crate::api::{ProgramApi, Value, ValueKind};
use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;

/// What the generated functions do.
pub(crate) enum Body<'a> {
    /// Run the checked program whose source text is this.
    Checked {
        /// The program's source text (the runtime parses it once, on first use).
        source: &'a str,
    },
    /// The invocation has errors and will not compile: same items, no behaviour, so that code
    /// using them still resolves (and IDEs keep completing) while the error is fixed.
    Stub,
}

/// Lints the generated items must not trigger in the user's crate.
fn allowed_lints(body: &Body<'_>) -> TokenStream {
    let stub_only = match body {
        Body::Stub => quote!(unused_variables, unreachable_code,),
        Body::Checked { .. } => TokenStream::new(),
    };
    quote! {
        #[allow(
            non_snake_case,
            non_camel_case_types,
            non_upper_case_globals,
            dead_code,
            unreachable_pub,
            unused_qualifications,
            #stub_only
            clippy::too_many_arguments,
            clippy::needless_lifetimes
        )]
    }
}

/// An identifier the macro introduces for its own locals, hygienic so that it cannot clash
/// with a parameter of the program that has the same name (a program may call an input `ctx`).
fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// `name: &'a Tensor`, `name: f64` or `dim: usize`.
fn param_decl(v: &Value, is_dim: bool, lifetime: &TokenStream) -> TokenStream {
    let ident = &v.ident;
    match (is_dim, v.kind) {
        (true, _) => quote!(#ident: usize),
        (false, ValueKind::Scalar) => quote!(#ident: f64),
        (false, ValueKind::Tensor) => quote!(#ident: & #lifetime ::popcorn::Tensor),
    }
}

/// The declarations of the call parameters (inputs, then free dimensions).
fn param_decls(api: &ProgramApi, lifetime: &TokenStream) -> Vec<TokenStream> {
    let inputs = api.inputs.iter().map(|v| param_decl(v, false, lifetime));
    let dims = api.free_dims.iter().map(|v| param_decl(v, true, lifetime));
    inputs.chain(dims).collect()
}

/// Expands one program to its module.
pub(crate) fn program_module(api: &ProgramApi, body: &Body<'_>) -> TokenStream {
    let module = &api.module;
    let name = &api.name;
    let allow = allowed_lints(body);
    let sig = &api.signature;
    let ctx = local("ctx");
    let out = local("out");
    let no_lifetime = TokenStream::new();
    let decls = param_decls(api, &no_lifetime);
    let lifetime = quote!('a);
    let arg_decls = param_decls(api, &lifetime);
    let call_args: Vec<&Ident> = api.call_params().map(|v| &v.ident).collect();

    let module_doc = match body {
        Body::Checked { .. } => format!(
            " The popcorn program `{sig}`, checked at compile time.\n\n \
             Call [`run`] (or [`run_into`] in a loop) with a `popcorn::Context`."
        ),
        Body::Stub => format!(
            " Stand-in for the popcorn program `{sig}`, which has compile errors: \
             fix them to get its real API."
        ),
    };
    let fields = api.outputs.iter().map(|o| {
        let ident = &o.ident;
        let (ty, what) = match o.kind {
            ValueKind::Tensor => (quote!(::popcorn::Tensor), "tensor"),
            ValueKind::Scalar => (quote!(f64), "scalar"),
        };
        let doc = format!(" The output `{}` ({what}).", o.name);
        quote! { #[doc = #doc] pub #ident: #ty }
    });

    let program_doc = format!(" The checked program `{sig}` (parsed once, on first use).");
    let run_doc = format!(
        " Runs `{sig}` on `ctx` and returns its outputs.\n\n \
         Tensor parameters are `&Tensor`, scalar parameters `f64`; dimensions that no input \
         determines come last, as `usize`, in sorted order.\n\n \
         # Errors\n\n \
         When an argument does not match the signature (a tensor of the wrong kind, sizes \
         that disagree), when planning fails, or when the device fails."
    );
    let run_into_doc = format!(
        " Runs `{sig}` on `ctx`, writing into the tensors already in `out` where their \
         shapes fit and allocating the others: passing the same `out` in a loop allocates \
         nothing after the first call. Read the results with `out.tensor(\"name\")` and \
         `out.scalar(\"name\")`.\n\n \
         # Errors\n\n \
         As for [`run`]."
    );
    let args_doc = format!(" The arguments of `{sig}` for `popcorn::Context::run`, by name.");

    let (program_fn, run_body, run_into_body, args_body) = match body {
        Body::Checked { source } => {
            let program_fn = quote! {
                /// The program's source text.
                pub const SOURCE: &str = #source;

                #[doc = #program_doc]
                pub fn program() -> &'static ::popcorn::Program {
                    static PROGRAM: ::popcorn::__private::OnceLock<::popcorn::Program> =
                        ::popcorn::__private::OnceLock::new();
                    PROGRAM.get_or_init(|| {
                        let found = ::popcorn::Program::parse_all(self::SOURCE)
                            .ok()
                            .and_then(|all| all.into_iter().find(|p| p.name == #name));
                        match found {
                            ::core::option::Option::Some(p) => p,
                            ::core::option::Option::None => ::core::panic!(
                                "popcorn: program `{}` was checked at compile time but does \
                                 not parse at run time; the popcorn-macros and popcorn-dsl \
                                 versions disagree",
                                #name
                            ),
                        }
                    })
                }
            };
            let take = api.outputs.iter().map(|o| {
                let ident = &o.ident;
                let oname = &o.name;
                match o.kind {
                    ValueKind::Tensor => quote!(#ident: #out.take(#oname)?),
                    ValueKind::Scalar => quote!(#ident: #out.scalar(#oname)?),
                }
            });
            let any_tensor = api.outputs.iter().any(|o| o.kind == ValueKind::Tensor);
            let binding = if any_tensor {
                quote!(let mut #out)
            } else {
                quote!(let #out)
            };
            let run_body = if api.outputs.is_empty() {
                quote! {
                    #ctx.run(self::program(), &self::args(#(#call_args),*))?;
                    ::core::result::Result::Ok(Outputs {})
                }
            } else {
                quote! {
                    #binding = #ctx.run(self::program(), &self::args(#(#call_args),*))?;
                    ::core::result::Result::Ok(Outputs { #(#take),* })
                }
            };
            let run_into_body = quote! {
                #ctx.run_into(self::program(), &self::args(#(#call_args),*), #out)
            };
            let binds = api.inputs.iter().map(|v| {
                let ident = &v.ident;
                let vname = &v.name;
                match v.kind {
                    ValueKind::Tensor => quote!(.tensor(#vname, #ident)),
                    ValueKind::Scalar => quote!(.scalar(#vname, #ident)),
                }
            });
            let dims = api.free_dims.iter().map(|v| {
                let ident = &v.ident;
                let vname = &v.name;
                quote!(.dim(#vname, #ident))
            });
            let args_body = quote!(::popcorn::Args::new() #(#binds)* #(#dims)*);
            (program_fn, run_body, run_into_body, args_body)
        }
        Body::Stub => {
            let unavailable = quote!(::core::unreachable!("the program has compile errors"));
            let program_fn = quote! {
                /// The program's source text (empty: the program has compile errors).
                pub const SOURCE: &str = "";

                #[doc = #program_doc]
                pub fn program() -> &'static ::popcorn::Program { #unavailable }
            };
            (
                program_fn,
                unavailable.clone(),
                unavailable.clone(),
                unavailable,
            )
        }
    };

    let outputs_doc = format!(" The outputs of `{sig}`, one field per output.");
    quote! {
        #[doc = #module_doc]
        #allow
        pub mod #module {
            #program_fn

            #[doc = #outputs_doc]
            #[derive(Debug)]
            pub struct Outputs {
                #(#fields),*
            }

            #[doc = #run_doc]
            pub fn run(
                #ctx: &::popcorn::Context,
                #(#decls),*
            ) -> ::core::result::Result<Outputs, ::popcorn::RuntimeError> {
                #run_body
            }

            #[doc = #run_into_doc]
            pub fn run_into(
                #ctx: &::popcorn::Context,
                #(#decls,)*
                #out: &mut ::popcorn::Outputs,
            ) -> ::core::result::Result<(), ::popcorn::RuntimeError> {
                #run_into_body
            }

            #[doc = #args_doc]
            pub fn args<'a>(#(#arg_decls),*) -> ::popcorn::Args<'a> {
                #args_body
            }
        }
    }
}
