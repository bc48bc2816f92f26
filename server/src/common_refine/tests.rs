use super::*;

/// A toy scorer: a chunk's score is its mean token id (so chunks of small ids
/// are the "natural" ones).
fn mean_id(tokens: &[u32]) -> Result<f64> {
    Ok(tokens.iter().map(|&t| f64::from(t)).sum::<f64>() / tokens.len() as f64)
}

fn never_out_of_budget() -> bool {
    true
}

#[test]
fn settings_refuse_fractions_outside_zero_to_one_and_an_empty_budget() {
    let minute = Duration::from_secs(60);
    assert!(RefineSettings::new(1.0, minute, 256).is_ok());
    assert!(RefineSettings::new(0.01, minute, 256).is_ok());
    for bad in [0.0, -0.5, 1.01, f64::NAN] {
        let error = RefineSettings::new(bad, minute, 256).unwrap_err().to_string();
        assert!(error.contains("(0, 1]"), "{error}");
    }
    assert!(RefineSettings::new(0.5, Duration::ZERO, 256).unwrap_err().to_string().contains("more than 0 seconds"));
    assert!(RefineSettings::new(0.5, minute, 8).unwrap_err().to_string().contains("16 to 2048 tokens"));

    assert_eq!(parse_fraction("0.25"), Ok(0.25));
    for bad in ["0", "1.5", "-1", "half", "NaN"] {
        assert!(parse_fraction(bad).unwrap_err().contains("(0, 1]"), "{bad}");
    }
    assert_eq!(parse_budget("90"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_budget("0.5"), Ok(Duration::from_millis(500)));
    for bad in ["0", "-3", "inf", "soon"] {
        assert!(parse_budget(bad).unwrap_err().contains("positive number of seconds"), "{bad}");
    }
}

#[test]
fn files_are_cut_into_windows_and_a_short_tail_joins_the_last_one() {
    let sequences = vec![(0..10).collect(), vec![7], (0..9).collect::<Vec<u32>>(), vec![]];
    let cut = chunks(&sequences, 4);
    let spans: Vec<(usize, usize, usize)> = cut.iter().map(|c| (c.file, c.start, c.end)).collect();
    // File 0: 0..4, 4..8, 8..10 (2 tokens, over a quarter window: its own chunk).
    // File 1: one token, nothing to score. File 2: 0..4, 4..9 (a 1-token tail joined).
    assert_eq!(spans, [(0, 0, 4), (0, 4, 8), (0, 8, 10), (2, 0, 4), (2, 4, 9)]);
    assert_eq!(cut.iter().map(Chunk::len).sum::<usize>(), 19);
}

#[test]
fn the_order_is_seeded_and_takes_every_file_once_before_any_twice() {
    let sequences: Vec<Vec<u32>> = [40usize, 8, 24, 16].iter().map(|&n| vec![1; n]).collect();
    let cut = chunks(&sequences, 8);
    assert_eq!(cut.len(), 11);
    let order = sample_order(&cut, 7);
    assert_eq!(order, sample_order(&cut, 7), "the same seed gives the same order");
    assert_ne!(order, sample_order(&cut, 8), "another seed, another order");
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(sorted, cut, "a permutation of the chunks");
    let mut first_round: Vec<usize> = order[..4].iter().map(|c| c.file).collect();
    first_round.sort();
    assert_eq!(first_round, [0, 1, 2, 3], "one chunk of each file first");
    let mut second_round: Vec<usize> = order[4..7].iter().map(|c| c.file).collect();
    second_round.sort();
    assert_eq!(second_round, [0, 2, 3]);
}

#[test]
fn the_lowest_perplexity_share_of_the_scored_chunks_is_kept() {
    // Four files of two chunks each; file f holds ids 10f.. in its first chunk and 100 + f in its second.
    let sequences: Vec<Vec<u32>> =
        (0..4u32).map(|f| [vec![10 * f; 4], vec![100 + f; 4]].concat()).collect::<Vec<Vec<u32>>>();
    let order = sample_order(&chunks(&sequences, 4), 1);
    let scored = score(&order, &sequences, &mut mean_id, &mut never_out_of_budget, &mut |_| {}).unwrap();
    assert_eq!(scored.len(), 8);
    let kept = select(&scored, 0.5).unwrap();
    let starts: Vec<(usize, usize)> = kept.iter().map(|s| (s.chunk.file, s.chunk.start)).collect();
    assert_eq!(starts, [(0, 0), (1, 0), (2, 0), (3, 0)], "the four low-id chunks, in corpus order");
    // A fraction rounds up to whole chunks, and keeps at least one.
    assert_eq!(select(&scored, 0.3).unwrap().len(), 3);
    assert_eq!(select(&scored, 1e-9).unwrap().len(), 1);
    assert_eq!(select(&scored, 1.0).unwrap().len(), 8);
    assert!(select(&[], 0.5).unwrap_err().to_string().contains("no chunk was scored"));

    let summary = RefineSummary::new(8, &scored, &kept, 1.0);
    assert_eq!((summary.scored_tokens, summary.kept, summary.kept_tokens), (32, 4, 16));
    assert_eq!(summary.threshold_nll, 30.0);
    assert!(summary.mean_nll_kept < summary.mean_nll_scored);
}

#[test]
fn scoring_stops_when_the_budget_is_spent_and_skips_unscorable_chunks() {
    let sequences: Vec<Vec<u32>> = (0..6u32).map(|f| vec![f; 16]).collect();
    let order = sample_order(&chunks(&sequences, 16), 3);
    let mut allowed = 4;
    let mut budget = || {
        allowed -= 1;
        allowed >= 0
    };
    let mut seen = Vec::new();
    // File 2's chunk has no finite score.
    let mut scorer = |t: &[u32]| if t[0] == 2 { Ok(f64::NAN) } else { mean_id(t) };
    let scored = score(&order, &sequences, &mut scorer, &mut budget, &mut |p| seen.push(p)).unwrap();
    assert_eq!(seen.len(), 4, "four chunks within the budget");
    assert_eq!(seen.last().unwrap(), &Progress { scored: 4, total: 6, tokens: 64 });
    let expected = order[..4].iter().filter(|c| c.file != 2).count();
    assert_eq!(scored.len(), expected);

    let mut failing = |_: &[u32]| -> Result<f64> { bail!("the model failed") };
    let error = score(&order, &sequences, &mut failing, &mut never_out_of_budget, &mut |_| {}).unwrap_err();
    assert!(error.to_string().contains("the model failed"));
}

#[test]
fn neighbouring_kept_chunks_of_a_file_are_joined() {
    let sequences = vec![(0..12).collect::<Vec<u32>>(), (20..24).collect()];
    let kept: Vec<Scored> = [(0, 0, 4), (0, 4, 8), (1, 0, 4)]
        .iter()
        .map(|&(file, start, end)| Scored { chunk: Chunk { file, start, end }, nll: 1.0 })
        .collect();
    let out = kept_sequences(&kept, &sequences);
    assert_eq!(out, vec![(0..8).collect::<Vec<u32>>(), (20..24).collect()]);
    let apart = [kept[0], Scored { chunk: Chunk { file: 0, start: 8, end: 12 }, nll: 1.0 }];
    assert_eq!(kept_sequences(&apart, &sequences), vec![(0..4).collect::<Vec<u32>>(), (8..12).collect()]);
}

#[test]
fn the_real_model_finds_natural_code_more_likely_than_its_tokens_shuffled() {
    let options = copilotd_model::LoadOptions { threads: Some(1), ..Default::default() };
    let mut model = Model::load(&copilotd_test_support::model_path(), &options).unwrap();
    let code = "def mean(values):\n    \"\"\"The arithmetic mean of a non-empty list.\"\"\"\n    total = 0\n    \
                for value in values:\n        total += value\n    return total / len(values)\n";
    let natural = model.tokenizer().encode(code).unwrap();
    let mut shuffled = natural.clone();
    shuffled.shuffle(&mut StdRng::seed_from_u64(11));
    assert_ne!(shuffled, natural);
    let natural_nll = perplexity::mean_nll(&mut model, &natural).unwrap();
    let shuffled_nll = perplexity::mean_nll(&mut model, &shuffled).unwrap();
    assert!(natural_nll.is_finite() && shuffled_nll.is_finite(), "{natural_nll} {shuffled_nll}");
    assert!(natural_nll > 0.0 && natural_nll < shuffled_nll, "natural {natural_nll}, shuffled {shuffled_nll}");
    assert_eq!(model.cache_len(), 0, "scoring leaves the cache empty");
    // A chunk the model cannot score is an error, not a number.
    assert!(perplexity::mean_nll(&mut model, &natural[..1]).is_err());
}
