use super::*;
use crate::path::cache::tests::entry;

fn window(bytes: Option<u64>) -> Window {
    Window {
        bytes,
        from: "test".into(),
    }
}

#[test]
fn the_first_copy_holds_the_bandwidth_delay_product_within_4_to_16_streams() {
    let linux = window(Some(4 << 20));
    assert_eq!(first_streams(4.0, &linux).0, 4);
    assert_eq!(first_streams(60.0, &linux).0, 8);
    assert_eq!(first_streams(75.0, &linux).0, 9);
    assert_eq!(first_streams(200.0, &linux).0, 16);
    // A DTN's 64 MiB buffers need no more than the floor.
    assert_eq!(first_streams(75.0, &window(Some(64 << 20))).0, 8);
    assert_eq!(first_streams(75.0, &window(None)).0, 8);
    // Servers held to 64 KiB: as many as the first copy may take.
    assert_eq!(first_streams(62.0, &window(Some(64 << 10))).0, 16);
}

/// Samples every `every` seconds of a run that moves `mbit` Mbit/s from `start` on.
fn run_at(streams: u32, mbit: f64, start: f64, every: f64, until: f64) -> FirstSeconds {
    let mut samples = Vec::new();
    let mut t = every;
    while t <= until {
        let bytes = ((t - start).max(0.0) * mbit * 1e6 / 8.0) as u64;
        samples.push((t, bytes));
        t += every;
    }
    FirstSeconds {
        streams,
        samples,
        left: Some(10 << 30),
        data_rtt_ms: None,
    }
}

/// A third-party copy whose client sits 34 ms from both servers, 63 ms apart: 16 streams
/// with 64 KiB windows move 70 Mbit/s. By the control channels' round trip they could move
/// 124 (57 %, kept); by the one a server measured on the data connections, 66: held, so
/// they double.
#[test]
fn the_senders_data_round_trip_stands_in_for_the_control_channels() {
    let small = Some(64 << 10);
    let run = run_at(16, 70.0, 1.0, 1.0, 12.0);
    let Retuned::Keep(why) = judge_first_seconds(&run, 34.0, small) else {
        panic!("by the control channels the windows are not the limit");
    };
    assert!(
        why.contains("round trip 34.0 ms on the control channels"),
        "{why}"
    );
    let said = FirstSeconds {
        data_rtt_ms: Some(63.0),
        ..run
    };
    let Retuned::Streams(32, why) = judge_first_seconds(&said, 34.0, small) else {
        panic!("by the data connections' round trip the windows hold the streams");
    };
    assert!(
        why.contains("round trip 63.0 ms on the data connections"),
        "{why}"
    );
}

#[test]
fn the_first_seconds_double_streams_held_by_their_windows_and_keep_the_others() {
    let small = Some(64 << 10);
    // Past slow start (2 s) and over 2 s more: not yet.
    let early = run_at(16, 130.0, 1.0, 0.25, 4.5);
    assert_eq!(judge_first_seconds(&early, 30.0, small), Retuned::Wait);
    // 16 streams of 32 KiB per 30 ms allow 140 Mbit/s: 130 is held by the windows.
    let held = run_at(16, 130.0, 1.0, 0.25, 6.0);
    let Retuned::Streams(32, why) = judge_first_seconds(&held, 30.0, small) else {
        panic!("16 window-bound streams should double");
    };
    assert!(why.contains("130 Mbit/s on 16 streams"), "{why}");
    // A third-party copy's markers come every 5 s: judged at the third.
    let tp = run_at(8, 100.0, 3.0, 5.0, 15.0);
    assert!(matches!(
        judge_first_seconds(&tp, 30.0, Some(32 << 10)),
        Retuned::Streams(16, _)
    ));
    // The same rate with Linux's 4 MiB buffers is the path's, not the windows'.
    let Retuned::Keep(why) = judge_first_seconds(&held, 30.0, Some(4 << 20)) else {
        panic!("streams far from their windows' limit stay");
    };
    assert!(why.contains("the path, not the windows"), "{why}");
    // Too little left to pay for a restart; already at the most; nothing to judge by.
    let ending = FirstSeconds {
        left: Some(100 << 20),
        ..held.clone()
    };
    assert!(matches!(
        judge_first_seconds(&ending, 30.0, small),
        Retuned::Keep(w) if w.contains("too little to restart")
    ));
    let most = FirstSeconds {
        streams: 32,
        ..run_at(32, 260.0, 1.0, 0.25, 6.0)
    };
    assert!(matches!(
        judge_first_seconds(&most, 30.0, small),
        Retuned::Keep(_)
    ));
    assert!(matches!(
        judge_first_seconds(&held, 30.0, None),
        Retuned::Keep(_)
    ));
    // Nothing moved yet.
    let idle = run_at(16, 0.0, 0.0, 0.25, 8.0);
    assert_eq!(judge_first_seconds(&idle, 30.0, small), Retuned::Wait);
    // Held but too little left to restart: the copy keeps its streams, and the next copy
    // searches upwards all the same; streams the path holds leave the search alone.
    let rule = FirstSecondsRule::new(30.0, small, true, None);
    assert!(matches!(rule.judge(&ending), Retuned::Keep(_)));
    assert!(rule.found_held() && rule.settled().is_none());
    let rule = FirstSecondsRule::new(30.0, Some(4 << 20), true, None);
    assert!(matches!(rule.judge(&held), Retuned::Keep(_)));
    assert!(!rule.found_held());
}

fn guard(floor_mbit: f64) -> Guard {
    let cc = |n| ferry_net::Congestion::new(n).unwrap();
    Guard {
        tried: cc("cubic"),
        back_to: cc("bbr"),
        floor_bps: floor_mbit * 1e6,
    }
}

#[test]
fn a_cubic_copy_whose_first_seconds_are_slow_goes_back_to_bbr_once_for_the_whole_copy() {
    // 60 ms, 1 % loss: cubic's 8 streams move 17 Mbit/s where bbr's copy moved 800.
    let rule = FirstSecondsRule::new(60.0, Some(4 << 20), false, Some(guard(400.0)));
    assert_eq!(rule.judge(&run_at(8, 17.0, 0.5, 0.25, 3.0)), Retuned::Wait);
    let Retuned::Sender(cc, why) = rule.judge(&run_at(8, 17.0, 0.5, 0.25, 6.0)) else {
        panic!("a slow cubic goes back to bbr");
    };
    assert_eq!(cc.as_str(), "bbr");
    assert!(
        why.contains("17 Mbit/s on 8 streams") && why.contains("under 400"),
        "{why}"
    );
    let (g, rate) = rule.fell_back().expect("remembered for the cache");
    assert_eq!(g.tried.as_str(), "cubic");
    assert!((rate - 17e6).abs() < 1e6, "{rate}");
    // Later files of the copy start on bbr and are not judged again.
    assert_eq!(
        rule.settled_sender().map(|c| c.to_string()),
        Some("bbr".into())
    );
    assert_eq!(
        rule.judge(&run_at(8, 800.0, 0.5, 0.25, 6.0)),
        Retuned::Keep(String::new())
    );
}

#[test]
fn a_cubic_copy_that_keeps_up_stays_on_cubic_and_a_first_copy_still_judges_its_streams() {
    let rule = FirstSecondsRule::new(15.0, Some(4 << 20), false, Some(guard(470.0)));
    let Retuned::Keep(why) = rule.judge(&run_at(1, 950.0, 0.2, 0.25, 6.0)) else {
        panic!("cubic at the link's rate stays");
    };
    assert!(why.contains("cubic kept"), "{why}");
    assert!(rule.fell_back().is_none() && rule.settled_sender().is_none());
    // With the stream search started again the same rule doubles held streams.
    let both = FirstSecondsRule::new(30.0, Some(64 << 10), true, Some(guard(50.0)));
    assert!(matches!(
        both.judge(&run_at(16, 130.0, 1.0, 0.25, 6.0)),
        Retuned::Streams(32, _)
    ));
}

#[test]
fn a_copy_remembers_the_most_streams_its_files_asked_for() {
    let rule = FirstSecondsRule::new(30.0, Some(64 << 10), true, None);
    assert_eq!(rule.settled(), None);
    rule.judge(&run_at(16, 130.0, 1.0, 0.25, 6.0));
    assert_eq!(rule.settled(), Some(32));
    rule.judge(&run_at(8, 65.0, 1.0, 0.25, 6.0));
    assert_eq!(
        rule.settled(),
        Some(32),
        "a later file asking fewer does not lower it"
    );
}

#[test]
fn the_stream_search_decreases_while_throughput_holds_then_holds_and_goes_up_when_the_path_changes()
{
    let mut e = entry();
    let mut why = Vec::new();
    let here = window(crate::path::window::autotune_max());
    let first = first_streams(e.rtt_ms, &here).0;
    assert_eq!(
        choose_streams(&e, &here, &mut why),
        first,
        "first copy at 75 ms"
    );
    step_search(&mut e, 8, 800e6);
    assert_eq!(e.search, Search::Decrease);
    assert_eq!(
        choose_streams(&e, &here, &mut why),
        7,
        "one fewer, as the seed"
    );
    step_search(&mut e, 7, 790e6); // within 97 %: fewer still
    assert_eq!(e.best_streams, Some(7));
    assert_eq!(choose_streams(&e, &here, &mut why), 6);
    step_search(&mut e, 6, 600e6); // worse: back to the best and hold
    assert_eq!(e.search, Search::Hold);
    assert_eq!(choose_streams(&e, &here, &mut why), 7);
    step_search(&mut e, 7, 805e6); // steady
    assert_eq!(e.search, Search::Hold);
    step_search(&mut e, 7, 500e6); // the path changed: search upwards
    assert_eq!(e.search, Search::Increase);
    assert_eq!(choose_streams(&e, &here, &mut why), 8);
    step_search(&mut e, 8, 600e6); // gained: on, a quarter more
    assert_eq!((e.best_streams, e.search), (Some(8), Search::Increase));
    assert_eq!(choose_streams(&e, &here, &mut why), 10);
    step_search(&mut e, 10, 601e6); // no gain: hold at 8
    assert_eq!(e.search, Search::Hold);
    assert_eq!(choose_streams(&e, &here, &mut why), 8);
}
