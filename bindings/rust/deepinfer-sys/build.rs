//! Links libdeepinfer through pkg-config, with nothing but the standard library:
//! runs `pkg-config --libs deepinfer` (the `PKG_CONFIG` command when set, so
//! `PKG_CONFIG_PATH`, `PKG_CONFIG_LIBDIR` and `PKG_CONFIG_SYSROOT_DIR` act as for
//! any pkg-config user) and turns its `-L` and `-l` flags into cargo's
//! `rustc-link-search` and `rustc-link-lib`. `DEEPINFER_STATIC=1` links
//! libdeepinfer.a instead, with the libraries `pkg-config --static` lists.
//! The library's folder is published to dependents as `DEP_DEEPINFER_LIBDIR`.

use std::env;
use std::ffi::OsString;
use std::process::{exit, Command};

fn fail(what: &str) -> ! {
    eprintln!("deepinfer-sys: {}", what);
    eprintln!(
        "deepinfer-sys: install libdeepinfer (cmake --install BUILD --prefix PREFIX) and set \
         PKG_CONFIG_PATH=PREFIX/lib/pkgconfig (docs/rust.md)"
    );
    exit(1);
}

/// Runs pkg-config with `args` and the package name; its stdout, or a failure.
fn pkg_config(args: &[&str]) -> String {
    let cmd = env::var_os("PKG_CONFIG").unwrap_or_else(|| OsString::from("pkg-config"));
    let out = match Command::new(&cmd).args(args).arg("deepinfer").output() {
        Ok(out) => out,
        Err(e) => fail(&format!("cannot run {:?}: {}", cmd, e)),
    };
    if !out.status.success() {
        fail(&format!(
            "`{} {} deepinfer` failed: {}",
            cmd.to_string_lossy(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    match String::from_utf8(out.stdout) {
        Ok(s) => s.trim().to_string(),
        Err(_) => fail("pkg-config's output is not UTF-8"),
    }
}

fn main() {
    for var in [
        "PKG_CONFIG",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
        "DEEPINFER_STATIC",
    ] {
        println!("cargo:rerun-if-env-changed={}", var);
    }
    println!("cargo:rerun-if-changed=build.rs");

    // The safe crate refuses nothing at run time that it could refuse here: a
    // library older than the header these declarations come from is an error.
    let version = pkg_config(&["--modversion"]);
    let parts: Vec<u32> = version.split('.').map(|p| p.parse().unwrap_or(0)).collect();
    if parts.len() < 2 || (parts[0], parts[1]) < (0, 1) {
        fail(&format!("libdeepinfer {} is older than 0.1", version));
    }

    let statik = env::var("DEEPINFER_STATIC")
        .map(|v| v == "1")
        .unwrap_or(false);
    let libs = if statik {
        pkg_config(&["--static", "--libs"])
    } else {
        pkg_config(&["--libs"])
    };
    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={}", dir);
        } else if let Some(lib) = flag.strip_prefix("-l") {
            if statik && lib == "deepinfer" {
                println!("cargo:rustc-link-lib=static=deepinfer");
            } else {
                println!("cargo:rustc-link-lib={}", lib);
            }
        } else if flag == "-pthread" {
            println!("cargo:rustc-link-lib=pthread");
        }
        // Other flags (linker options) are left to the host's own build.
    }
    println!("cargo:libdir={}", pkg_config(&["--variable=libdir"]));
}
