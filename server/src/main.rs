use std::process::ExitCode;

fn main() -> ExitCode {
    match copilotd::cli::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line: the error and its causes.
            let causes: Vec<String> = error.chain().map(|cause| cause.to_string()).collect();
            eprintln!("copilotd: error: {}", causes.join(": "));
            ExitCode::FAILURE
        }
    }
}
