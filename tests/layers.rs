//! The layers only point down (SPEC.md §1): a module of the library may
//! name only modules of lower layers (and its own), never one above it.
//!
//! ```text
//! 0  limits  error            foundations: Limits, EncodeError
//! 1  ndarray                  the NdArray data type
//! 2  value                    Value, Block, Header
//! 3  msgpack  envelope        msgpack ⇄ Value;  layer 1, the TCP framing
//! 4  message                  layer 2: frame 0 and placeholders
//! 5  serialize                layer 3: families, collections, shards, compression
//! 6  protocol  mmap           dumps/loads through every layer, DecodeError; mapped frames
//! 7  typed                    serde: to_value / from_value
//! 8  transport                tokio: Connection, FrameCodec, the handshake, MessageCodec
//! 9  dask                     the Dask messages, RPC calls, batched streams
//! ```
//!
//! Every `crate::<module>` path in the code of `src/` (comments and doc
//! comments aside) is checked against this table. `lib.rs`, the crate root
//! that re-exports everything, is exempt.

use std::fs;
use std::path::{Path, PathBuf};

const LAYERS: &[(&str, u32)] = &[
    ("limits", 0),
    ("error", 0),
    ("ndarray", 1),
    ("value", 2),
    ("msgpack", 3),
    ("envelope", 3),
    ("message", 4),
    ("serialize", 5),
    ("protocol", 6),
    ("mmap", 6),
    ("pickle", 6),
    ("typed", 7),
    ("transport", 8),
    ("dask", 9),
];

fn layer(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to: `src/serialize/read.rs` → `serialize`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap();
    first.trim_end_matches(".rs").to_owned()
}

/// Every `crate::x` in the code of `text` (line comments removed), with its line.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push((n + 1, name));
            }
            rest = after;
        }
        // `use crate::{a, b}` groups.
        if let Some(i) = code.find("crate::{") {
            let group = &code[i + "crate::{".len()..];
            for part in group.split([',', '}']) {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push((n + 1, name));
                }
            }
        }
    }
    out
}

#[test]
fn no_module_names_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    let mut checked = 0;
    for file in &files {
        let module = module_of(&src, file);
        if module == "lib" {
            continue;
        }
        let own = layer(&module).unwrap_or_else(|| {
            panic!(
                "{}: module {module:?} has no layer in LAYERS",
                file.display()
            )
        });
        let text = fs::read_to_string(file).unwrap();
        for (line, name) in crate_paths(&text) {
            checked += 1;
            if name.is_empty() || name == module || name.chars().next().unwrap().is_uppercase() {
                continue; // `crate::` alone, itself, or a re-exported type at the root
            }
            let Some(theirs) = layer(&name) else {
                violations.push(format!(
                    "{}:{line}: unknown module crate::{name}",
                    file.display()
                ));
                continue;
            };
            if theirs >= own {
                violations.push(format!(
                    "{}:{line}: {module} (layer {own}) names crate::{name} (layer {theirs})",
                    file.display()
                ));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} crate paths found: is the scan broken?"
    );
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// Root re-exports (`crate::Value`) hide which module a name comes from:
/// lower layers must name the module instead, so the check above sees it.
#[test]
fn lower_layers_name_modules_not_root_reexports() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let module = module_of(&src, file);
        if module == "lib" || layer(&module).is_some_and(|l| l >= 6) {
            continue;
        }
        let text = fs::read_to_string(file).unwrap();
        for (line, name) in crate_paths(&text) {
            if name.chars().next().is_some_and(char::is_uppercase) {
                violations.push(format!("{}:{line}: crate::{name}", file.display()));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// The check itself: a higher layer named from a lower one is caught.
#[test]
fn the_scan_sees_upward_paths() {
    let text = "use crate::limits::Limits;\n// use crate::transport::X;\nfn f() { crate::serialize::x(); }\nuse crate::{message, value};\n";
    let found: Vec<String> = crate_paths(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(found, ["limits", "serialize", "message", "value"]);
}
