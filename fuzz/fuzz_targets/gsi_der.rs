//! The GSI crate's own DER readers (certificate extensions, basicConstraints, ProxyCertInfo in
//! both encodings) over arbitrary bytes: values or errors, never a panic; what parses
//! re-encodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ferry_gsi::fuzz_der_readers(data);
});
