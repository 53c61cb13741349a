//! UDT datagrams from anyone: `Packet::parse` never panics, every control packet it returns
//! is written back to bytes that parse the same, and an open connection that is fed the
//! datagrams (its own data sent meanwhile) never panics and never reads more than was sent.
#![no_main]

use std::time::{Duration, Instant};

use ferry_udt::handshake::{Handshake, REQUEST, STREAM, VERSION};
use ferry_udt::packet::{write_control, Packet};
use ferry_udt::{Config, Connection, ReadOutcome};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let peer = "10.0.0.1:9000".parse().unwrap();
    let request = Handshake {
        version: VERSION,
        socket_type: STREAM,
        isn: 1000,
        mss: 1500,
        flight_flag: 8192,
        request_type: REQUEST,
        id: 7,
        cookie: 0,
        peer_ip: [0; 4],
    };
    let mut conn = Connection::accept(Config::default(), t0, 9, peer, &request);
    conn.write(&[0x5a; 100_000]);
    let mut out = vec![0u8; 65_536];
    let mut read = vec![0u8; 65_536];
    let mut now = t0;
    let mut got = 0usize;
    // Datagrams are separated by 0xFE bytes; each is fed, then time moves on by its first
    // byte in milliseconds.
    for datagram in data.split(|&b| b == 0xFE) {
        if let Ok(packet) = Packet::parse(datagram) {
            if let Packet::Control { timestamp, dst, body } = &packet {
                let n = write_control(&mut out, *timestamp, *dst, body);
                assert_eq!(Packet::parse(&out[..n]).as_ref(), Ok(&packet));
            }
            conn.handle(now, &packet);
        }
        now += Duration::from_millis(u64::from(datagram.first().copied().unwrap_or(1)));
        conn.handle_timeout(now);
        while conn.poll_transmit(now, &mut out).is_some() {}
        if let Ok(ReadOutcome::Data(n)) = conn.read(&mut read) {
            got += n;
        }
        assert!(got <= data.len() * 65_536);
    }
});
