//! Regenerates the Rust code of throttle-fleet-tonic's protos (`proto/*.proto`)
//! into `proto/gen/`, which is checked in so that neither CI nor users need a
//! protobuf compiler. The protos are parsed by `protox`, a protobuf compiler
//! written in Rust, so no system `protoc` is needed here either.
//!
//! Run from the workspace root after changing a proto:
//!
//! ```text
//! cargo run --manifest-path crates/throttle-fleet-tonic/codegen/Cargo.toml
//! ```
//!
//! This crate is its own workspace (see its `Cargo.toml`): the throttle
//! workspace, and so CI, never builds it.

use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let proto = root.join("proto");
    let out = proto.join("gen");
    std::fs::create_dir_all(&out)?;

    let files = [proto.join("helloworld.proto"), proto.join("echo.proto")];
    let descriptors = protox::compile(&files, [&proto])?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .out_dir(&out)
        .compile_fds(descriptors)?;

    for file in &files {
        println!("generated code for {}", file.display());
    }
    println!("into {}", out.display());
    Ok(())
}
