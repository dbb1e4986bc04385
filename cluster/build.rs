//! Compiles `proto/basalt.proto` with protox (a pure-Rust protobuf compiler), so building Basalt
//! needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/basalt.proto");
    let fds = protox::compile(["proto/basalt.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
