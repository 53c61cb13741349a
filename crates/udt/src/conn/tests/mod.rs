//! Two connections in memory over a simulated path (rate, delay, queue, loss, duplication,
//! reordering) on a manual clock.

mod acks;
mod cubic;
mod limits;
mod sim;

use self::sim::*;
use super::*;
use crate::packet::AckInfo;
use proptest::prelude::*;
use std::time::{Duration, Instant};

#[test]
fn a_clean_path_delivers_every_byte_in_order() {
    let d = data(3_000_000);
    let out = transfer(
        &d,
        Path::clean(),
        Config::default(),
        1,
        Duration::from_secs(60),
    );
    assert_eq!(out.received.len(), d.len());
    assert!(out.received == d);
    assert_eq!(out.client.resent, 0, "{:?}", out.client);
}

#[test]
fn a_small_flight_flag_is_the_window_limit_not_a_panic() {
    // libudt's default flight flag is 25 600 packets, below the receiver's 32 768 floor.
    for fc in [32, 1_024, 25_600] {
        let d = data(3_000_000);
        let config = Config {
            flight_flag: fc,
            ..Config::default()
        };
        let out = transfer(&d, Path::clean(), config, 9, Duration::from_secs(60));
        assert!(out.received == d, "flight flag {fc}");
    }
}

#[test]
fn both_controllers_recover_from_heavy_loss_duplication_and_reordering() {
    let path = Path {
        loss: 0.05,
        duplicate: 0.02,
        jitter: Duration::from_millis(3),
        ..Path::clean()
    };
    for controller in [Controller::Bbr, Controller::Udt] {
        let d = data(1_000_000);
        let config = Config {
            controller,
            ..Config::default()
        };
        let out = transfer(&d, path, config, 7, Duration::from_secs(120));
        assert!(
            out.received == d,
            "{controller:?}: {} of {} bytes",
            out.received.len(),
            d.len()
        );
        assert!(out.client.resent > 0);
    }
}

#[test]
fn bbr_outpaces_cudtcc_many_times_on_a_randomly_lossy_path() {
    // 1 % random loss, 60 ms RTT, 20 000 packets/s, a 100 ms queue: CUDTCC backs off on every
    // loss epoch, the model does not. (Steady state here: about 0.6 of the link for the model;
    // on netlab's 1 Gbit/s, 60 ms, 1 % path it moved 615 Mbit/s, `bench/` scenario `udt`.)
    let path = Path {
        loss: 0.01,
        one_way: Duration::from_millis(30),
        queue: 2_000,
        ..Path::clean()
    };
    let d = data(160_000_000);
    let bbr = transfer(&d, path, Config::default(), 3, Duration::from_secs(600));
    assert!(bbr.received == d);
    assert!(
        bbr.steady_rate() > 0.5 * path.rate,
        "bbr {} pkt/s",
        bbr.steady_rate()
    );
    let d = data(8_000_000);
    let udt = transfer(
        &d,
        path,
        Config {
            controller: Controller::Udt,
            ..Config::default()
        },
        3,
        Duration::from_secs(600),
    );
    assert!(udt.received == d);
    assert!(
        bbr.steady_rate() > 3.0 * udt.steady_rate(),
        "bbr {} udt {}",
        bbr.steady_rate(),
        udt.steady_rate()
    );
}

#[test]
fn a_quiet_start_does_not_hold_the_rate_down() {
    // A few hundred bytes, then nothing for a second, as a GSI handshake before MODE E data:
    // the rates measured while the sender had nothing to send must not become the model.
    let path = Path {
        rate: 50_000.0,
        one_way: Duration::from_micros(200),
        ..Path::clean()
    };
    let d = data(60_000_000);
    let script = Script {
        prelude: 300,
        idle: Duration::from_secs(1),
        ..Script::default()
    };
    steady_above(&d, script, path, 5, 0.7);
}

/// Moves `d` over `path` as `script` says (from `seed`, two simulated minutes at most): every
/// byte arrives, and the second half runs above `share` of the path's rate.
fn steady_above(d: &[u8], script: Script, path: Path, seed: u64, share: f64) {
    let out = delivered(d, script, path, seed, Duration::from_secs(120));
    assert!(
        out.steady_rate() > share * path.rate,
        "seed {seed}: {:.0} pkt/s",
        out.steady_rate()
    );
}

#[test]
fn a_short_path_comes_back_to_its_rate_after_start_up_overshoots_it() {
    // 1 Gbit/s, 40 µs and a queue of 85 packets: start-up's last round overflows it. Drain
    // must end although the ACK interval (10 ms) keeps more than a product in flight; draining
    // on at a third of the rate once wore the model down to nothing (as on loopback).
    let path = Path {
        rate: 85_000.0,
        one_way: Duration::from_micros(20),
        queue: 85,
        ..Path::clean()
    };
    let d = data(60_000_000);
    // (A stuck drain ends at a few hundred packets a second, and the copy not at all.)
    for seed in [1, 2, 3, 4] {
        steady_above(&d, Script::default(), path, seed, 0.25);
    }
}

#[test]
fn a_receiver_that_closes_and_exits_at_once_leaves_the_sender_acknowledged() {
    // A client done with a get closes its data connections and exits; the server's side
    // waits for the last acknowledgement, which was lost. The goodbye carries the ACK again,
    // so the sender ends with everything acknowledged and no error, at once, not after a
    // silence timeout (nor on an error for data unacknowledged).
    let path = Path {
        one_way: Duration::from_millis(30),
        ..Path::clean()
    };
    let d = data(3_000_000);
    for seed in 1..=5 {
        let script = Script {
            receiver_leaves: true,
            lose_final_ack: true,
            ..Script::default()
        };
        let out = delivered(&d, script, path, seed, Duration::from_secs(60));
        assert_eq!(out.client_error, None, "seed {seed}");
        assert!(out.client_flushed, "seed {seed}: data left unacknowledged");
        assert!(
            out.elapsed < Duration::from_secs(10),
            "seed {seed}: the sender heard no goodbye for {:?}",
            out.elapsed
        );
    }
}

#[test]
fn a_silent_peer_is_given_up_on() {
    let path = Path {
        loss: 1.0,
        ..Path::clean()
    };
    let config = Config {
        connect_timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let t0 = Instant::now();
    let mut c = Connection::connect(config, t0, 1, SERVER.parse().unwrap());
    let mut now = t0;
    let mut buf = [0u8; 1500];
    let _ = path;
    while !c.is_closed() && now.duration_since(t0) < Duration::from_secs(5) {
        c.handle_timeout(now);
        while c.poll_transmit(now, &mut buf).is_some() {}
        now = c
            .poll_timeout()
            .unwrap_or(now)
            .max(now + Duration::from_millis(1));
    }
    assert_eq!(c.error(), Some(&ConnError::HandshakeTimeout(2)));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn any_mix_of_loss_duplication_and_reordering_loses_nothing(
        seed in any::<u64>(),
        loss in 0.0f64..0.2,
        duplicate in 0.0f64..0.1,
        jitter_ms in 0u64..20,
        len in 1usize..300_000,
        udt in any::<bool>(),
    ) {
        let path = Path { loss, duplicate, jitter: Duration::from_millis(jitter_ms), ..Path::clean() };
        let controller = if udt { Controller::Udt } else { Controller::Bbr };
        let d = data(len);
        let out = transfer(&d, path, Config { controller, ..Config::default() }, seed, Duration::from_secs(600));
        prop_assert!(out.server_error.is_none(), "{:?}", out.server_error);
        prop_assert_eq!(out.received.len(), d.len());
        prop_assert!(out.received == d);
    }
}

/// The ISN of [`accepted`]'s peer.
const ACCEPTED_ISN: u32 = 5000;

/// A connection accepted from a peer with id 7 (ours is 9), `heard` from once already (a
/// keep-alive) or not: until then its data waits ([`READY_HOLD`]).
fn accepted(now: Instant, heard: bool) -> Connection {
    accepted_with(Config::default(), now, heard)
}

/// [`accepted`] with this side's `config`.
fn accepted_with(config: Config, now: Instant, heard: bool) -> Connection {
    let request = Handshake {
        version: crate::handshake::VERSION,
        socket_type: crate::handshake::STREAM,
        isn: ACCEPTED_ISN,
        mss: 1500,
        flight_flag: 8192,
        request_type: crate::handshake::REQUEST,
        id: 7,
        cookie: 0,
        peer_ip: [0; 4],
    };
    let mut conn = Connection::accept(config, now, 9, CLIENT.parse().unwrap(), &request);
    if heard {
        conn.handle(
            now,
            &Packet::Control {
                timestamp: 0,
                dst: 9,
                body: Control::KeepAlive,
            },
        );
    }
    conn
}

#[test]
fn a_flood_of_naks_beyond_what_was_sent_is_counted_and_ignored() {
    let t0 = Instant::now();
    let mut conn = accepted(t0, true);
    conn.write(&data(100 * 1456));
    let mut out = vec![0u8; 2048];
    while conn.poll_transmit(t0, &mut out).is_some() {}
    let sent = conn.stats().sent;
    assert!(sent > 0);
    for i in 0..10_000u32 {
        // Ranges past the last packet sent, reversed ranges, singles far ahead.
        let words = match i % 3 {
            0 => vec![0x8000_0000 | (ACCEPTED_ISN + 200), ACCEPTED_ISN + 300],
            1 => vec![0x8000_0000 | (ACCEPTED_ISN + 20), ACCEPTED_ISN + 10],
            _ => vec![ACCEPTED_ISN + 1_000_000],
        };
        conn.handle(
            t0,
            &Packet::Control {
                timestamp: 0,
                dst: 9,
                body: Control::Nak(words),
            },
        );
    }
    assert_eq!(conn.stats().bogus_naks, 10_000);
    assert_eq!(conn.sender.as_ref().unwrap().losses.len(), 0);
    assert!(conn.error().is_none());
    // A genuine report still works.
    conn.handle(
        t0,
        &Packet::Control {
            timestamp: 0,
            dst: 9,
            body: Control::Nak(vec![ACCEPTED_ISN]),
        },
    );
    assert_eq!(conn.sender.as_ref().unwrap().losses.len(), 1);
}

#[test]
fn a_long_path_with_random_loss_fills_within_seconds_and_resends_little() {
    // 200 ms, 0.1 % loss, a one-product queue (netlab's long-haul, at a quarter of its rate
    // to keep the simulation short). The first RTT sample must replace libudt's 100 ms guess,
    // start-up must double each round, and a round of holes must not read as a faster path:
    // each of those once held this path to a fifth of its rate for many seconds.
    let path = Path {
        rate: 20_000.0,
        loss: 0.001,
        one_way: Duration::from_millis(100),
        queue: 4_000,
        ..Path::clean()
    };
    let d = data(300_000_000);
    for seed in [1, 2, 3] {
        let out = transfer(
            &d,
            path,
            Config::default(),
            seed,
            Duration::from_millis(10_050),
        );
        let from_5_s = (out.timeline[99] - out.timeline[49]) as f64 / 1456.0 / 5.0;
        assert!(
            from_5_s > 0.7 * path.rate,
            "seed {seed}: {from_5_s:.0} pkt/s from the 5th second"
        );
        assert!(
            out.client.resent * 10 < out.client.sent,
            "seed {seed}: {:?}",
            out.client
        );
    }
}

/// Moves `d` as [`transfer_after`] does with the default configuration; every byte arrives.
fn delivered(d: &[u8], script: Script, path: Path, seed: u64, limit: Duration) -> Outcome {
    let out = transfer_after(d, script, path, Config::default(), seed, limit);
    assert!(out.received == d, "seed {seed}: bytes differ");
    out
}

/// The number in environment variable `k`, or `d`: the experiments' settings.
fn env(k: &str, d: f64) -> f64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// Not a test: prints the rate each half second over a path set by RATE (packets/s), RTT_MS,
/// LOSS, SEED and SECS, for tuning the controller:
/// `RTT_MS=200 LOSS=0.001 cargo test --release -p ferry-udt path_experiment -- --ignored --nocapture`.
#[test]
#[ignore]
fn path_experiment() {
    let rtt = env("RTT_MS", 200.0);
    let path = Path {
        rate: env("RATE", 85_000.0),
        loss: env("LOSS", 0.001),
        one_way: Duration::from_millis(rtt as u64 / 2),
        queue: (env("RATE", 85_000.0) / 1000.0 * rtt) as usize,
        ..Path::clean()
    };
    let d = data(1_000_000_000);
    let out = transfer(
        &d,
        path,
        Config::default(),
        env("SEED", 5.0) as u64,
        Duration::from_secs(env("SECS", 30.0) as u64),
    );
    for s in [5usize, 10, 20] {
        if let Some(n) = out.timeline.get(s * 10 - 1) {
            eprintln!(
                "first {s} s: {:.0} Mbit/s",
                *n as f64 * 8.0 / s as f64 / 1e6
            );
        }
    }
    let mut last = 0;
    for (i, &n) in out.timeline.iter().enumerate() {
        if i % 5 == 4 {
            eprintln!(
                "{:.1}s {:.0} Mbit/s",
                (i + 1) as f64 / 10.0,
                (n - last) as f64 * 8.0 / 0.5 / 1e6
            );
            last = n;
        }
    }
    eprintln!("{:?}", out.client);
}

/// Not a test: one CUBIC flow alone for 10 s, then a UDT transfer of SIZE bytes beside it,
/// over RATE (packets/s), RTT_MS and a queue of QUEUE products; prints each one's share
/// while both ran. `cargo test --release -p ferry-udt fairness_experiment -- --ignored --nocapture`.
#[test]
#[ignore]
fn fairness_experiment() {
    let rtt = env("RTT_MS", 60.0);
    let rate = env("RATE", 85_000.0);
    let path = Path {
        rate,
        loss: env("LOSS", 0.0),
        one_way: Duration::from_micros((rtt * 500.0) as u64),
        queue: (rate / 1000.0 * rtt * env("QUEUE", 1.0)) as usize,
        ..Path::clean()
    };
    let out = beside_cubic(path, env("SIZE", 1e9) as usize, env("SEED", 5.0) as u64);
    let mut last = (0, 0);
    for (i, (&u, &t)) in out.timeline.iter().zip(&out.tcp_timeline).enumerate() {
        if i % 10 == 9 {
            eprintln!(
                "{:>4.1}s udt {:>6.0} tcp {:>6.0} pkt/s",
                (i + 1) as f64 / 10.0,
                (u - last.0) as f64 / 1456.0,
                (t - last.1) as f64
            );
            last = (u, t);
        }
    }
    let (udt, tcp) = rates_beside(&out);
    eprintln!(
        "udt {udt:.0} pkt/s, tcp {tcp:.0} pkt/s, tcp share {:.2}, {:?}",
        tcp / (udt + tcp),
        out.client
    );
}

/// How long the CUBIC flow runs alone before the transfer starts.
const CUBIC_ALONE: Duration = Duration::from_secs(10);

/// One CUBIC flow alone for [`CUBIC_ALONE`], then `size` bytes over UDT beside it.
fn beside_cubic(path: Path, size: usize, seed: u64) -> Outcome {
    let d = data(size);
    let script = Script {
        idle: CUBIC_ALONE,
        beside_cubic: true,
        ..Script::default()
    };
    delivered(&d, script, path, seed, Duration::from_secs(90))
}

/// Packets per second of the UDT transfer and of the TCP flow while the transfer ran.
fn rates_beside(out: &Outcome) -> (f64, f64) {
    let from = (CUBIC_ALONE.as_millis() / 100) as usize;
    let end = out.timeline.len().min(out.tcp_timeline.len());
    let secs = (end - from) as f64 / 10.0;
    let udt = out.received.len() as f64 / 1456.0 / (out.elapsed - CUBIC_ALONE).as_secs_f64();
    let tcp = (out.tcp_timeline[end - 1] - out.tcp_timeline[from - 1]) as f64 / secs;
    (udt, tcp)
}

#[test]
fn a_cubic_flow_sharing_the_bottleneck_keeps_a_third_of_it_and_so_do_we() {
    // netlab's fairness path scaled to 200 Mbit/s: 60 ms, a queue of one product, a CUBIC
    // flow that filled it before the transfer began. Counting only what is in flight, not the
    // loss beside a standing queue, ferry once left it a quarter (0.21-0.27 here; 0.25 on
    // netlab at 1 Gbit/s).
    let path = Path {
        rate: 17_000.0,
        one_way: Duration::from_millis(30),
        queue: 1_020,
        ..Path::clean()
    };
    for seed in [5, 6, 8] {
        let out = beside_cubic(path, 200_000_000, seed);
        let (udt, tcp) = rates_beside(&out);
        let share = tcp / (udt + tcp);
        assert!(
            (1.0 / 3.0..2.0 / 3.0).contains(&share),
            "seed {seed}: ferry {udt:.0} pkt/s, CUBIC {tcp:.0} pkt/s"
        );
    }
}

#[test]
fn a_light_ack_of_everything_is_no_delivery_the_goodbye_waits_for_a_full_one() {
    // libudt's receiver makes data readable only as its timer's full ACK goes out, and sends
    // none after a shutdown: a goodbye after a light ACK strands what only that covered (CI
    // saw 19.7 of 24 MiB reach libudt's reader, the peer none the wiser).
    let t0 = Instant::now();
    let isn = ACCEPTED_ISN;
    let mut conn = accepted(t0, true);
    conn.write(&data(100 * 1456));
    conn.close();
    let mut out = vec![0u8; 2048];
    let mut now = t0;
    while conn.sender.as_ref().unwrap().next < 100 && now < t0 + Duration::from_secs(1) {
        now += Duration::from_millis(1);
        conn.handle_timeout(now);
        while conn.poll_transmit(now, &mut out).is_some() {}
    }
    assert_eq!(conn.sender.as_ref().unwrap().next, 100);
    let ack = |full: Option<AckInfo>| Packet::Control {
        timestamp: 0,
        dst: 9,
        body: Control::Ack(Ack {
            number: u32::from(full.is_some()),
            ack: isn + 100,
            full,
        }),
    };
    let goodbye = |conn: &mut Connection, at: Instant| {
        conn.handle_timeout(at);
        let mut out = vec![0u8; 2048];
        std::iter::from_fn(|| conn.poll_transmit(at, &mut out).map(|n| out[..n].to_vec())).any(
            |p| {
                matches!(
                    Packet::parse(&p),
                    Ok(Packet::Control {
                        body: Control::Shutdown,
                        ..
                    })
                )
            },
        )
    };
    conn.handle(now, &ack(None));
    assert_eq!(conn.sender.as_ref().unwrap().in_flight(), 0);
    let t1 = now + Duration::from_millis(50);
    assert!(!conn.flushed());
    assert!(!goodbye(&mut conn, t1), "a shutdown after a light ACK only");
    conn.handle(
        t1,
        &ack(Some(AckInfo {
            rtt: 1000,
            rtt_var: 500,
            available: 8000,
            ..AckInfo::default()
        })),
    );
    assert!(conn.flushed());
    assert!(goodbye(&mut conn, t1), "no shutdown after the full ACK");
    assert!(conn.error().is_none());
}

#[test]
fn an_accepted_connection_holds_its_data_until_the_peer_answers_or_briefly() {
    // What goes out by `at`: data packets, and the number of the last full ACK.
    let drain = |conn: &mut Connection, at: Instant| {
        if conn.poll_timeout().is_some_and(|t| t <= at) {
            conn.handle_timeout(at);
        }
        let (mut data, mut asked) = (0, None);
        let mut out = vec![0u8; 2048];
        while let Some(n) = conn.poll_transmit(at, &mut out) {
            match Packet::parse(&out[..n]) {
                Ok(Packet::Data { .. }) => data += 1,
                Ok(Packet::Control {
                    body:
                        Control::Ack(Ack {
                            number,
                            full: Some(_),
                            ..
                        }),
                    ..
                }) => asked = Some(number),
                _ => {}
            }
        }
        (data, asked)
    };
    // Whether the peer answers, and when the endpoint first sends (a busy endpoint sends its
    // handshake answer late: the hold runs from then).
    for (answers, first) in [(true, 0), (false, 0), (false, 15)] {
        let t0 = Instant::now();
        let mut conn = accepted(t0, false);
        conn.write(&data(100 * 1456));
        let sent = t0 + Duration::from_millis(first);
        let mut asked = None;
        for ms in 0..10 {
            let (data, a) = drain(&mut conn, sent + Duration::from_millis(ms));
            assert_eq!(data, 0, "data at {ms} ms, before the peer was heard");
            asked = a.or(asked);
        }
        let asked = asked.expect("no full ACK asked whether the peer is ready");
        let at = sent + Duration::from_millis(10);
        if answers {
            conn.handle(
                at,
                &Packet::Control {
                    timestamp: 0,
                    dst: 9,
                    body: Control::Ack2 { number: asked },
                },
            );
            assert!(drain(&mut conn, at).0 > 0, "no data after the peer's ACK2");
        } else {
            assert_eq!(drain(&mut conn, sent + Duration::from_millis(19)).0, 0);
            let late = sent + READY_HOLD;
            assert!(drain(&mut conn, late).0 > 0, "held past {READY_HOLD:?}");
        }
        assert!(conn.error().is_none());
    }
}
