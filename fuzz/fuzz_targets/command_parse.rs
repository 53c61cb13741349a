//! `Command::parse` on arbitrary bytes: never panics, and a parsed command's canonical line
//! parses back to the same command.
#![no_main]

use ferry_proto::command::MAX_COMMAND_LINE;
use ferry_proto::Command;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(cmd) = Command::parse(data) else {
        return;
    };
    let line = cmd.to_string();
    // The canonical line may be a few bytes longer than the input (documented on Display);
    // past the limit it cannot parse, which is the limit working, not a round-trip bug.
    if line.len() + 2 > MAX_COMMAND_LINE {
        return;
    }
    let again = Command::parse(line.as_bytes());
    assert_eq!(again.as_ref(), Ok(&cmd), "canonical line {line:?}");
    assert_eq!(cmd.verb(), again.map(|c| c.verb()).unwrap_or_default());
});
