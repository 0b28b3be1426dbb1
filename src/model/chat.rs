//! Chat templates. An instruct model expects the user's text inside its chat template; the lab
//! applies the one family it runs, ChatML (Qwen2.5: `<|im_start|>role\n…<|im_end|>\n`), when the
//! model's own template is ChatML — `chat_template` of tokenizer_config.json, or a GGUF's
//! `tokenizer.chat_template`. A template of another family is not guessed at: the prompt goes in
//! as it is, and `generate` says so. No Jinja engine: the ChatML template's one choice that
//! matters here is its default system message, read from the template's text.

/// ChatML with the template's default system message, if it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMl {
    pub system: Option<String>,
}

impl ChatMl {
    /// The template's family, if ChatML.
    pub fn from_template(template: &str) -> Option<Self> {
        if !template.contains("<|im_start|>") || !template.contains("<|im_end|>") {
            return None;
        }
        // Qwen2.5 writes `'<|im_start|>system\nYou are Qwen, … assistant.<|im_end|>\n'` for a
        // conversation that brings no system message of its own; `\n` is escaped in the source.
        let marker = "<|im_start|>system\\n";
        let system = template.match_indices(marker).find_map(|(at, _)| {
            let rest = &template[at + marker.len()..];
            let text = &rest[..rest.find("<|im_end|>")?];
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
    let text = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok()?;
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
        assert_eq!(chat.system.as_deref(), Some("You are Qwen, created by Alibaba Cloud. You are a helpful assistant."));
        assert_eq!(
            chat.apply("显存是什么?"),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n显存是什么?<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn other_families_are_not_guessed() {
        assert_eq!(ChatMl::from_template("{{ bos_token }}[INST] {{ message }} [/INST]"), None);
        let bare = ChatMl::from_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}").unwrap();
        assert_eq!(bare.system, None);
        assert_eq!(bare.apply("hi"), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    }
}
