use super::*;

fn assert_send_sync_clone<T: Send + Sync + Clone>() {}

#[test]
fn a_connection_is_shared_between_tasks() {
    assert_send_sync_clone::<Connection>();
    assert_send_sync_clone::<Health>();
}
