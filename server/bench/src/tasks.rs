//! Repository-level completion tasks: functions of real Python
//! packages whose bodies are cut out; the model completes each body from the
//! start, with the file before it as prompt.

use anyhow::{Context, Result};
use std::path::Path;
use tree_sitter::{Node, Parser};

/// Body sizes a task may have, in lines (inclusive).
pub const BODY_LINES: std::ops::RangeInclusive<usize> = 4..=30;

/// One task: complete `file` at byte `cursor`.
#[derive(Clone, Debug)]
pub struct Task {
    /// Path relative to the package root.
    pub file: String,
    pub function: String,
    /// The file's text with the body (after its docstring) removed: what
    /// the workspace holds while the task runs.
    pub cut_text: String,
    /// Byte offset of the cursor in `cut_text` (and in the original).
    pub cursor: usize,
    /// The removed body text, for reference.
    pub reference: String,
}

impl Task {
    /// 1-based line of the cursor.
    pub fn line(&self) -> usize {
        1 + self.cut_text[..self.cursor].matches('\n').count()
    }
}

/// All eligible functions in the Python files under `root`, in path order.
pub fn find_tasks(root: &Path) -> Result<Vec<Task>> {
    let mut parser = Parser::new();
    parser.set_language(&tree_sitter_python::LANGUAGE.into()).context("cannot load the Python grammar")?;
    let files = copilotd_server::python_files::python_files(root, &[])?;
    let mut tasks = Vec::new();
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let Some(tree) = parser.parse(&text, None) else { continue };
        let relative = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().replace('\\', "/");
        collect(tree.root_node(), &text, &relative, &mut tasks);
    }
    Ok(tasks)
}

/// `count` tasks spread evenly over `tasks`.
pub fn spread(tasks: Vec<Task>, count: usize) -> Vec<Task> {
    if tasks.len() <= count {
        return tasks;
    }
    let step = tasks.len() as f64 / count as f64;
    (0..count).map(|i| tasks[(i as f64 * step) as usize].clone()).collect()
}

fn collect(node: Node, text: &str, file: &str, tasks: &mut Vec<Task>) {
    if node.kind() == "function_definition" {
        if let Some(task) = task_for(node, text, file) {
            tasks.push(task);
        }
    }
    let mut cursor = node.walk();
    for child in node.children(&mut cursor) {
        collect(child, text, file, tasks);
    }
}

fn task_for(function: Node, text: &str, file: &str) -> Option<Task> {
    let body = function.child_by_field_name("body")?;
    let lines = body.end_position().row - body.start_position().row + 1;
    if !BODY_LINES.contains(&lines) {
        return None;
    }
    // Keep a docstring in the prompt, as the benchmarks this follows do.
    let mut statements = body.named_children(&mut body.walk()).collect::<Vec<_>>().into_iter();
    let mut first = statements.next()?;
    if is_docstring(first) {
        first = statements.next()?;
    }
    if body.end_position().row - first.start_position().row + 1 < 3 {
        return None;
    }
    let cursor = first.start_byte();
    let end = body.end_byte();
    let name = function.child_by_field_name("name")?.utf8_text(text.as_bytes()).ok()?.to_string();
    Some(Task {
        file: file.to_string(),
        function: name,
        cut_text: format!("{}{}", &text[..cursor], &text[end..]),
        cursor,
        reference: text[cursor..end].to_string(),
    })
}

fn is_docstring(statement: Node) -> bool {
    statement.kind() == "expression_statement" && statement.named_child(0).is_some_and(|n| n.kind() == "string")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_cut_after_the_docstring() {
        let dir = tempfile::tempdir().unwrap();
        let source = "import os\n\n\ndef short():\n    return 1\n\n\ndef long(x):\n    \"\"\"Doc.\"\"\"\n    a = x\n    b = a + 1\n    c = b * 2\n    return c\n\n\nTAIL = 1\n";
        std::fs::write(dir.path().join("m.py"), source).unwrap();
        let tasks = find_tasks(dir.path()).unwrap();
        assert_eq!(tasks.len(), 1);
        let task = &tasks[0];
        assert_eq!(task.function, "long");
        assert!(task.cut_text[..task.cursor].ends_with("\"\"\"Doc.\"\"\"\n    "));
        assert_eq!(task.reference, "a = x\n    b = a + 1\n    c = b * 2\n    return c");
        assert_eq!(&task.cut_text[task.cursor..], "\n\n\nTAIL = 1\n");
        assert_eq!(task.line(), 10);
    }

    #[test]
    fn spread_picks_evenly() {
        let task = |i: usize| Task {
            file: i.to_string(),
            function: String::new(),
            cut_text: String::new(),
            cursor: 0,
            reference: String::new(),
        };
        let picked: Vec<String> = spread((0..10).map(task).collect(), 3).into_iter().map(|t| t.file).collect();
        assert_eq!(picked, ["0", "3", "6"]);
    }
}
