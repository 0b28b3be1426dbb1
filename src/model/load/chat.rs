//! Chat templates. An instruct model expects the user's text inside its chat template; the lab
//! applies the one family it runs, ChatML (Qwen2.5: `<|im_start|>role\n…<|im_end|>\n`), when the
//! model's own template is ChatML — `chat_template` of tokenizer_config.json, or a GGUF's
//! `tokenizer.chat_template`. A template of another family is not guessed at: the prompt goes in
//! as it is, and `generate` says so. No Jinja engine: the ChatML template's one choice that
//! matters here is its default system message, read from the template's text.

/// The longest chat template read, and the longest default system message looked for.
const MAX_TEMPLATE: usize = 256 << 10;
const MAX_SYSTEM: usize = 8 << 10;

/// ChatML with the template's default system message, if it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMl {
    pub system: Option<String>,
}

impl ChatMl {
    /// The template's family, if ChatML.
    pub fn from_template(template: &str) -> Option<Self> {
        // Real templates are a few KiB (Qwen2.5's 2.5, Qwen3's 4); a larger text is not read.
        if template.len() > MAX_TEMPLATE || !template.contains("<|im_start|>") || !template.contains("<|im_end|>") {
            return None;
        }
        // Qwen2.5 writes `'<|im_start|>system\nYou are Qwen, … assistant.<|im_end|>\n'` for a
        // conversation that brings no system message of its own; `\n` is escaped in the source.
        let marker = "<|im_start|>system\\n";
        let system = template.match_indices(marker).find_map(|(at, _)| {
            // The default message ends within a few KiB: each marker looks that far, no further,
            // so a template of many markers costs linear time.
            let rest = &template[at + marker.len()..];
            let window = &rest[..rest.floor_char_boundary(MAX_SYSTEM)];
            let text = &window[..window.find("<|im_end|>")?];
            // A system message taken from the conversation (`messages[0]['content']`) is no default.
            (!text.contains("{{") && !text.contains('\'') && !text.is_empty()).then(|| text.to_string())
        });
        Some(Self { system })
    }

    /// One user turn and the assistant's opening, as the template renders it with
    /// `add_generation_prompt`.
    pub fn apply(&self, user: &str) -> String {
        let system = self.system.as_ref().map(|s| format!("<|im_start|>system\n{s}<|im_end|>\n")).unwrap_or_default();
        format!("{system}<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
    }
}

/// The chat template of tokenizer_config.json in `dir`, if any.
pub fn template_in(dir: &std::path::Path) -> Option<String> {
    let text = crate::paths::read_regular_text(&dir.join("tokenizer_config.json"), 16 << 20).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json.get("chat_template")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of Qwen2.5-7B-Instruct's template, as tokenizer_config.json stores it.
    const QWEN25: &str = r#"{%- if tools %}\n    {{- '<|im_start|>system\n' }}\n{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}\n    {%- else %}\n        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}\n    {%- endif %}\n{%- endif %}"#;

    #[test]
    fn qwen25_template_gives_chatml_with_its_default_system() {
        let chat = ChatMl::from_template(QWEN25).unwrap();
        assert_eq!(
            chat.system.as_deref(),
            Some("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")
        );
        assert_eq!(
            chat.apply("显存是什么?"),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n显存是什么?<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn a_long_template_costs_linear_time_or_is_not_read() {
        let many = format!("<|im_end|>{}", "<|im_start|>system\\n".repeat(12_000));
        // 12,000 markers each looking 8 KiB ahead at most (it was 12,000 × the rest of the text).
        assert_eq!(ChatMl::from_template(&many).map(|c| c.system), Some(None));
        assert_eq!(ChatMl::from_template(&"<|im_start|><|im_end|>".repeat(20_000)), None, "over 256 KiB");
    }

    #[test]
    fn other_families_are_not_guessed() {
        assert_eq!(ChatMl::from_template("{{ bos_token }}[INST] {{ message }} [/INST]"), None);
        let bare = ChatMl::from_template(
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
        )
        .unwrap();
        assert_eq!(bare.system, None);
        assert_eq!(bare.apply("hi"), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    }
}
