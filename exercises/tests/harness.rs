//! The grading harness itself: a `todo!()` is caught as "not answered", and each verdict reads as it should. These
//! pass with the stubs and with the answers alike (tests/grade.rs is what the stubs must fail).

use exercises::{attempt, verdict};

#[test]
fn attempt_catches_a_todo_and_keeps_a_value() {
    assert_eq!(attempt(|| -> u64 { todo!("exercise") }), None);
    assert_eq!(attempt(|| 57_344u64), Some(57_344));
    // The hook is back: a second attempt behaves the same.
    assert_eq!(attempt(|| -> f64 { panic!("again") }), None);
}

#[test]
fn verdict_says_each_case() {
    assert!(verdict("q", None, 1.0, 0.0).contains("not answered"));
    assert!(verdict("q", Some(57_344.0), 57_344.0, 0.0).contains("✅"));
    assert!(verdict("q", Some(0.0), 0.0, 0.0).contains("✅"));
    assert!(verdict("q", Some(100.5), 100.0, 0.01).contains("✅"));
    let off = verdict("q", Some(110.0), 100.0, 0.01);
    assert!(off.contains("❌") && off.contains("10.000%"), "{off}");
    assert!(verdict("q", Some(f64::NAN), 1.0, 0.1).contains("❌"));
}
