//! `parse_list_line` on arbitrary text: never panics, and an entry it returns has a name that
//! is not `.` or `..` and is a part of the line.
#![no_main]

use ferry_proto::dirlist::parse_list_line;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    if let Some(entry) = parse_list_line(&line) {
        assert!(entry.name != "." && entry.name != "..");
        assert!(line.contains(entry.name.as_str()));
    }
});
