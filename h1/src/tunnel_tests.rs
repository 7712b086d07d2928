use super::*;

use Direction::{Down, Up};

const SEND: Duration = Duration::from_secs(60);
const GRACE: Duration = Duration::from_secs(5);

fn observed() -> Tunnel {
    Tunnel::new(true, SEND, GRACE)
}

fn events(t: &mut Tunnel) -> Vec<Event> {
    std::iter::from_fn(|| t.poll_event()).collect()
}

fn ended(why: End, failed: bool) -> Event {
    Event::Ended { why, failed }
}

fn copy(dir: Direction, bytes: &'static [u8]) -> Event {
    Event::Copy(dir, Bytes::from_static(bytes))
}

/// Writes `dir`'s bytes in full and flushes, as a side that takes everything at once would.
fn pass(t: &mut Tunnel, dir: Direction) {
    let Some(Transmit::Write(bytes)) = t.poll_transmit(dir) else {
        panic!("nothing to write {dir:?}");
    };
    let n = bytes.len();
    t.handle_written(dir, n);
    assert_eq!(t.poll_transmit(dir), Some(Transmit::Flush));
    t.handle_flushed(dir);
}

#[test]
fn one_read_is_in_flight_per_direction_until_it_is_written_and_flushed() {
    let mut t = Tunnel::new(false, SEND, GRACE);
    assert!(t.wants_read(Up) && t.wants_read(Down));
    t.handle_read(Up, Bytes::from_static(b"hello"));
    assert!(!t.wants_read(Up), "a second read while bytes wait");
    assert!(t.wants_read(Down), "the other direction is not held");
    assert_eq!(t.poll_transmit(Up), Some(Transmit::Write(b"hello")));
    t.handle_written(Up, 2);
    assert_eq!(t.poll_transmit(Up), Some(Transmit::Write(b"llo")));
    assert!(!t.wants_read(Up));
    t.handle_written(Up, 3);
    assert_eq!(t.poll_transmit(Up), Some(Transmit::Flush));
    assert!(!t.wants_read(Up), "written but not flushed");
    t.handle_flushed(Up);
    assert_eq!(t.poll_transmit(Up), None);
    assert!(t.wants_read(Up));
    assert_eq!(t.poll_transmit(Down), None);
    assert_eq!(
        events(&mut t),
        [],
        "an unobserved tunnel stamps and copies nothing"
    );
}

#[test]
fn a_read_is_stamped_before_its_bytes_may_be_written_and_copied_after() {
    let mut t = observed();
    t.handle_read(Down, Bytes::from_static(b"data"));
    assert_eq!(
        t.poll_transmit(Down),
        None,
        "written before its stamp was taken"
    );
    assert_eq!(t.poll_event(), Some(Event::Stamp(Down)));
    assert_eq!(t.poll_transmit(Down), Some(Transmit::Write(b"data")));
    t.handle_written(Down, 4);
    assert_eq!(events(&mut t), [], "copied before the write was flushed");
    t.handle_flushed(Down);
    assert_eq!(events(&mut t), [copy(Down, b"data")]);
    assert!(t.wants_read(Down));
}

#[test]
fn a_write_that_waits_hands_its_copy_over_before_the_wait() {
    let t0 = Instant::now();
    let mut t = observed();
    t.handle_read(Down, Bytes::from_static(b"data"));
    assert_eq!(events(&mut t), [Event::Stamp(Down)]);
    t.handle_written(Down, 1);
    t.handle_write_waits(Down, t0);
    assert_eq!(events(&mut t), [copy(Down, b"data")]);
    assert!(
        !t.wants_read(Down),
        "the copy went, the bytes are still unwritten"
    );
    t.handle_written(Down, 3);
    t.handle_write_waits(Down, t0);
    t.handle_flushed(Down);
    assert_eq!(events(&mut t), [], "one copy per read");
    assert!(t.wants_read(Down));
}

#[test]
fn copies_of_both_directions_come_out_in_the_order_of_their_stamps() {
    let mut t = observed();
    t.handle_read(Up, Bytes::from_static(b"up"));
    t.handle_read(Down, Bytes::from_static(b"down"));
    assert_eq!(events(&mut t), [Event::Stamp(Up), Event::Stamp(Down)]);
    // The later stamp's write finishes first: its copy waits for the earlier one's write.
    pass(&mut t, Down);
    assert_eq!(events(&mut t), []);
    assert!(!t.wants_read(Down), "read again before its copy went");
    t.handle_write_waits(Up, Instant::now());
    assert_eq!(events(&mut t), [copy(Up, b"up"), copy(Down, b"down")]);
    assert!(t.wants_read(Down));
    assert!(!t.wants_read(Up));
}

#[test]
fn a_clean_end_is_passed_on_and_the_other_direction_finishes_within_the_grace() {
    let t0 = Instant::now();
    let mut t = observed();
    t.handle_read_end(Up, ReadEnd::Clean, t0);
    assert_eq!(t.poll_transmit(Up), Some(Transmit::Shutdown));
    assert!(!t.wants_read(Up));
    assert_eq!(t.poll_timeout(), Some(t0 + GRACE));
    t.handle_shut(Up);
    assert_eq!(t.poll_transmit(Up), None);
    // The upstream still answers.
    assert!(t.wants_read(Down));
    t.handle_read(Down, Bytes::from_static(b"answer"));
    assert_eq!(events(&mut t), [Event::Stamp(Down)]);
    pass(&mut t, Down);
    assert_eq!(events(&mut t), [copy(Down, b"answer")]);
    t.handle_read_end(Down, ReadEnd::Clean, t0 + Duration::from_secs(1));
    assert_eq!(
        t.poll_timeout(),
        Some(t0 + GRACE),
        "the grace is not restarted"
    );
    assert_eq!(t.poll_transmit(Down), Some(Transmit::Shutdown));
    assert_eq!(events(&mut t), []);
    t.handle_shut(Down);
    assert_eq!(events(&mut t), [ended(End::Clean, false)]);
    assert_eq!(t.poll_timeout(), None);
}

#[test]
fn the_other_direction_is_cut_when_the_grace_runs_out() {
    let t0 = Instant::now();
    let mut t = Tunnel::new(false, SEND, GRACE);
    t.handle_read_end(Down, ReadEnd::Clean, t0);
    t.handle_shut(Down);
    t.handle_read(Up, Bytes::from_static(b"late"));
    t.handle_timeout(t0 + GRACE - Duration::from_millis(1));
    assert_eq!(events(&mut t), [], "cut before the grace ran out");
    t.handle_timeout(t0 + GRACE);
    assert_eq!(events(&mut t), [ended(End::GraceExpired, false)]);
    assert!(!t.wants_read(Down) && !t.wants_read(Up));
    assert_eq!(
        t.poll_transmit(Up),
        None,
        "nothing is written after the end"
    );
}

#[test]
fn a_write_that_waits_past_the_send_timeout_ends_the_tunnel_as_failed() {
    let t0 = Instant::now();
    let mut t = Tunnel::new(false, SEND, GRACE);
    t.handle_read(
        Down,
        Bytes::from_static(b"to a client that stopped reading"),
    );
    assert_eq!(
        t.poll_timeout(),
        None,
        "a write that never waited sets no deadline"
    );
    t.handle_write_waits(Down, t0);
    assert_eq!(t.poll_timeout(), Some(t0 + SEND));
    // Some progress, then waiting again: counted from the first wait, as a whole.
    t.handle_written(Down, 3);
    t.handle_write_waits(Down, t0 + Duration::from_secs(30));
    assert_eq!(t.poll_timeout(), Some(t0 + SEND));
    // The other direction goes on meanwhile.
    t.handle_read(Up, Bytes::from_static(b"x"));
    pass(&mut t, Up);
    assert!(t.wants_read(Up));
    t.handle_timeout(t0 + SEND);
    assert_eq!(events(&mut t), [ended(End::SendTimeout(Down), true)]);
}

#[test]
fn a_write_that_finishes_clears_its_send_timeout() {
    let t0 = Instant::now();
    let mut t = Tunnel::new(false, SEND, GRACE);
    t.handle_read(Up, Bytes::from_static(b"abc"));
    t.handle_write_waits(Up, t0);
    pass(&mut t, Up);
    assert_eq!(t.poll_timeout(), None);
    t.handle_timeout(t0 + SEND * 2);
    assert_eq!(events(&mut t), []);
    assert!(t.wants_read(Up));
}

#[test]
fn a_broken_read_ends_the_tunnel_at_once_and_counts_as_failed_only_before_a_clean_end() {
    let t0 = Instant::now();
    let mut t = observed();
    t.handle_read(Up, Bytes::from_static(b"never written"));
    assert_eq!(events(&mut t), [Event::Stamp(Up)]);
    t.handle_read_end(Down, ReadEnd::Broken, t0);
    assert_eq!(
        events(&mut t),
        [ended(End::Reset(Down), true)],
        "no copy of bytes whose write was never tried"
    );

    let mut t = observed();
    t.handle_read_end(Up, ReadEnd::Clean, t0);
    t.handle_read_end(Down, ReadEnd::Broken, t0);
    assert_eq!(events(&mut t), [ended(End::Reset(Down), false)]);
}

#[test]
fn a_failed_write_hands_its_copy_over_and_ends_the_tunnel() {
    let mut t = observed();
    t.handle_read(Up, Bytes::from_static(b"abc"));
    assert_eq!(events(&mut t), [Event::Stamp(Up)]);
    t.handle_written(Up, 0);
    assert_eq!(
        events(&mut t),
        [copy(Up, b"abc"), ended(End::Reset(Up), true)]
    );
    assert!(t.is_ended());
}

#[test]
fn at_the_end_a_written_read_still_gets_its_copy_when_an_earlier_stamp_never_will() {
    let mut t = observed();
    t.handle_read(Up, Bytes::from_static(b"never tried"));
    t.handle_read(Down, Bytes::from_static(b"written"));
    assert_eq!(events(&mut t), [Event::Stamp(Up), Event::Stamp(Down)]);
    pass(&mut t, Down);
    assert_eq!(events(&mut t), [], "held behind the earlier stamp");
    t.handle_read_end(Down, ReadEnd::Broken, Instant::now());
    assert_eq!(
        events(&mut t),
        [copy(Down, b"written"), ended(End::Reset(Down), true)]
    );
}

#[test]
fn a_tunnel_silent_for_a_whole_idle_period_ends_and_any_byte_keeps_it() {
    const IDLE: Duration = Duration::from_secs(600);
    let t0 = Instant::now();
    let mut t = Tunnel::new(false, SEND, GRACE).with_idle_timeout(IDLE, t0);
    assert_eq!(t.poll_timeout(), Some(t0 + IDLE));
    // A ping from the upstream (and the client's pong) within the first period: kept.
    t.handle_read(Down, Bytes::from_static(b"\x89\x00"));
    pass(&mut t, Down);
    t.handle_read(Up, Bytes::from_static(b"\x8a\x80\x00\x00\x00\x00"));
    pass(&mut t, Up);
    t.handle_timeout(t0 + IDLE);
    assert!(!t.is_ended(), "a period with bytes in it");
    assert_eq!(t.poll_timeout(), Some(t0 + IDLE * 2));
    // Then nothing for a whole period: ended, and not as a failure.
    t.handle_timeout(t0 + IDLE * 2 - Duration::from_millis(1));
    assert!(!t.is_ended(), "before the period's end");
    t.handle_timeout(t0 + IDLE * 2);
    assert!(t.is_ended());
    assert_eq!(events(&mut t), [ended(End::Idle, false)]);
    assert_eq!(t.poll_timeout(), None);
}

#[test]
fn without_an_idle_bound_a_silent_tunnel_has_no_deadline() {
    let mut t = Tunnel::new(false, SEND, GRACE);
    assert_eq!(t.poll_timeout(), None);
    t.handle_timeout(Instant::now() + Duration::from_secs(86_400));
    assert!(!t.is_ended());
}
