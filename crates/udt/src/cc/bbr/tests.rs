//! The model controller alone, fed ACKs of a scripted path.

use super::*;

/// An ACK at `at` of `acked` packets, `in_network` more sent, over a round trip of `rtt_us`
/// (the receiver's figure and the sender's sample alike) at `rate` packets/s.
fn sample(at: Instant, acked: u64, in_network: u64, rtt_us: u32, rate: u32) -> AckSample {
    let sent_at = at.checked_sub(Duration::from_micros(u64::from(rtt_us)));
    AckSample {
        acked,
        sent: acked + in_network,
        in_network,
        rtt_us,
        rtt_sample_us: rtt_us,
        receive_rate: rate,
        receive_rate_sample: Some(rate),
        counted_rate: Some(rate),
        bandwidth: rate,
        newest_sent_at: sent_at,
        newest_first_sent_at: sent_at,
        acked_resent: 0,
        app_limited: false,
        receiver_drain: None,
    }
}

/// Feeds ACKs of a path delivering `rate` packets/s with `rtt`, 10 ms apart.
fn drive(cc: &mut Bbr, t0: Instant, rate: f64, rtt_us: u32, ms: u64) {
    drive_queued(cc, t0, rate, rtt_us, 0, ms)
}

/// As [`drive`], with a queue standing: the receiver's round trip `queue_us` longer.
fn drive_queued(cc: &mut Bbr, t0: Instant, rate: f64, rtt_us: u32, queue_us: u32, ms: u64) {
    for i in 1..=ms / 10 {
        let acked = (rate * i as f64 / 100.0) as u64;
        let at = t0 + Duration::from_millis(i * 10);
        let in_network = (rate * f64::from(rtt_us) / 1e6) as u64;
        cc.on_ack(
            at,
            &AckSample {
                rtt_us: rtt_us + queue_us,
                ..sample(at, acked, in_network, rtt_us, rate as u32)
            },
        );
    }
}

#[test]
fn the_model_finds_the_path_rate_and_paces_at_it() {
    let t0 = Instant::now();
    let mut cc = Bbr::new(t0, 100_000);
    drive(&mut cc, t0, 80_000.0, 60_000, 5_000);
    assert!(matches!(cc.phase, Phase::Probe { .. }), "{:?}", cc.phase);
    let rate = 1e6 / cc.period_us();
    assert!((55_000.0..110_000.0).contains(&rate), "pacing {rate}");
    // Two products in the network, and the ACK interval's allowance.
    let bdp = 80_000.0 * 0.06;
    assert!(
        cc.window() > 1.9 * bdp && cc.window() < 2.6 * bdp,
        "{}",
        cc.window()
    );
}

#[test]
fn random_loss_below_the_ceiling_changes_nothing_but_heavy_loss_caps_the_window() {
    let t0 = Instant::now();
    let mut cc = Bbr::new(t0, 100_000);
    drive(&mut cc, t0, 80_000.0, 60_000, 3_000);
    let before = cc.window();
    cc.on_loss(
        t0,
        &LossSample {
            first: 1,
            newly_lost: 10,
            sent: 300_000,
            acked: 295_000,
            in_network: 5_000,
        },
    );
    assert!(cc.window() >= before * 0.9);
    cc.round_sent_from = 405_000;
    cc.on_loss(
        t0,
        &LossSample {
            first: 1,
            newly_lost: 1_000,
            sent: 410_000,
            acked: 400_000,
            in_network: 10_000,
        },
    );
    assert!(cc.window() < before);
}

#[test]
fn a_few_tenths_of_a_percent_lost_is_congestion_beside_a_standing_queue_only() {
    // 80 000 packets/s over 60 ms; half a percent of a round's packets lost: a lossy
    // path's noise with no queue, a queue overflowing (a CUBIC flow beside us) with one.
    for (queue_us, congested) in [(0, false), (40_000, true)] {
        let t0 = Instant::now();
        let mut cc = Bbr::new(t0, 100_000);
        drive_queued(&mut cc, t0, 80_000.0, 60_000, queue_us, 3_000);
        assert!(cc.settled);
        let before = cc.window();
        let exposed = cc.round_in_flight as u64;
        cc.on_loss(
            t0,
            &LossSample {
                first: 1,
                newly_lost: (exposed + 3_200) / 200,
                sent: cc.round_sent_from + 3_200,
                acked: cc.round_sent_from,
                in_network: 9_600,
            },
        );
        assert_eq!(cc.window() < before, congested, "queue {queue_us} µs");
        if congested {
            // 0.7 of what was in flight, above the floor of a product and the ACK
            // timer's allowance.
            assert!((cc.window() - 6_720.0).abs() < 1.0, "{}", cc.window());
        }
    }
}

#[test]
fn libudts_first_arrival_rates_are_its_initial_window_not_the_path() {
    // libudt's receiver answers one packet per second until half its 16 arrival gaps are
    // real; the model keeps its start-up pacing (about 5 ms a packet) meanwhile.
    let t0 = Instant::now();
    let mut cc = Bbr::new(t0, 25_600);
    for acked in 1..=8u64 {
        let at = t0 + Duration::from_millis(10 * acked);
        cc.on_ack(
            at,
            &AckSample {
                rtt_us: 100_000,
                bandwidth: 0,
                counted_rate: None,
                ..sample(at, acked, 1, 200, 1)
            },
        );
    }
    assert!(
        cc.period_us() < 10_000.0,
        "pacing every {} us",
        cc.period_us()
    );
}

#[test]
fn a_receiver_freeing_room_slower_than_the_path_sets_the_pace() {
    let t0 = Instant::now();
    let mut cc = Bbr::new(t0, 100_000);
    drive(&mut cc, t0, 80_000.0, 10_000, 3_000);
    let own = 1e6 / cc.period_us();
    let at = t0 + Duration::from_millis(3_010);
    let ack = |drain| AckSample {
        app_limited: true,
        receiver_drain: drain,
        ..sample(at, 240_800, 800, 10_000, 80_000)
    };
    cc.on_ack(at, &ack(Some(20_000.0)));
    let paced = 1e6 / cc.period_us();
    assert!((paced - 25_000.0).abs() < 1.0, "pacing {paced}, own {own}");
    // A reader faster than the model's own pace changes nothing.
    cc.on_ack(at, &ack(Some(1e6)));
    assert!((1e6 / cc.period_us() - own).abs() < own * 0.3);
}

#[test]
fn a_few_sparse_arrivals_do_not_cap_the_model_while_the_smoothed_rate_is_high() {
    // libudt's receive rate is the median gap of the last 16 arrivals: while the window is
    // full behind a hole only resends arrive, and one ACK's figure falls to a few hundred
    // packets a second. The path has not slowed; the smoothed figure says so.
    let t0 = Instant::now();
    let mut cc = Bbr::new(t0, 100_000);
    drive(&mut cc, t0, 80_000.0, 60_000, 3_000);
    let before = cc.bottleneck_rate();
    for i in 1..=100u64 {
        let at = t0 + Duration::from_millis(3_000 + 10 * i);
        let acked = 240_000 + 800 * i;
        cc.on_ack(
            at,
            &AckSample {
                receive_rate_sample: Some(700),
                counted_rate: None,
                ..sample(at, acked, 4_800, 60_000, 80_000)
            },
        );
    }
    assert!(
        cc.bottleneck_rate() > 0.8 * before,
        "{} after {before}",
        cc.bottleneck_rate()
    );
}

#[test]
fn a_libudt_receivers_burst_gaps_do_not_set_the_start_up_rate() {
    // netem or interrupt coalescing hands packets over in bursts: libudt's figure, from the
    // gaps inside them, reads five times the 20 000 packets/s the path delivers. A ferry
    // receiver's count (the extension word) is taken; libudt's figure is not.
    let t0 = Instant::now();
    let run = |counted: Option<u32>| {
        let mut cc = Bbr::new(t0, 100_000);
        for i in 1..=100u64 {
            let at = t0 + Duration::from_millis(10 * i);
            let acked = 200 * i;
            cc.on_ack(
                at,
                &AckSample {
                    receive_rate_sample: Some(100_000),
                    counted_rate: counted,
                    ..sample(at, acked, 200, 60_000, 20_000)
                },
            );
        }
        cc.bottleneck_rate()
    };
    let libudt = run(None);
    assert!(libudt < 25_000.0, "{libudt}");
    let ferry = run(Some(22_000));
    assert!((20_000.0..25_000.0).contains(&ferry), "{ferry}");
}
