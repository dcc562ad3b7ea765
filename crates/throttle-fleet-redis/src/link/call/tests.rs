use std::sync::LazyLock;

use super::*;

static SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("return {KEYS[1], ARGV[1], ARGV[2]}"));

fn words(cmd: &Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|a| match a {
            Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
            _ => "<cursor>".into(),
        })
        .collect()
}

#[test]
fn a_call_sent_whole_carries_the_body_and_the_same_keys_and_arguments() {
    let mut eval = Eval::new(&SCRIPT, 1, 2, 16);
    eval.arg("rl:{a}:k").arg(7).arg("x y");
    assert_eq!(
        words(&eval.cmd),
        ["EVALSHA", SCRIPT.get_hash(), "1", "rl:{a}:k", "7", "x y"]
    );
    assert_eq!(
        words(&eval.whole()),
        ["EVAL", SCRIPT.body(), "1", "rl:{a}:k", "7", "x y"]
    );
}
