//! `Model::time_products` on the real model: every kind of matrix a pass multiplies, with
//! the shapes and counts the configuration gives, and a time for each.

use crate::common;

use copilotd_model::WeightFormat;

#[test]
fn each_kind_of_matrix_is_timed_with_its_shape_and_count() {
    let model = common::load(WeightFormat::Auto);
    let c = model.config().clone();
    let timings = model.time_products(3, 1).unwrap();
    let listed: Vec<_> = timings.iter().map(|t| (t.name, t.shape, t.count)).collect();
    assert_eq!(
        listed,
        [
            ("qkv", (c.q_dim() + 2 * c.kv_dim(), c.hidden), c.layers),
            ("o", (c.hidden, c.q_dim()), c.layers),
            ("gate_up", (2 * c.intermediate, c.hidden), c.layers),
            ("down", (c.hidden, c.intermediate), c.layers),
            ("lm_head", (c.vocab_size, c.hidden), 1),
        ]
    );
    for t in &timings {
        assert!(t.ms > 0.0 && t.gmacs(3).is_finite(), "{t:?}");
    }
    assert!(model.time_products(0, 1).is_err(), "no input rows is an error");
}
