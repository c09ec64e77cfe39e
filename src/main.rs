//! The `state-store` binary: parse the command line, run it, exit with its code.
//! Everything else lives in the library, where the tests reach it.

fn main() {
    std::process::exit(state_store::main_exit_code());
}
