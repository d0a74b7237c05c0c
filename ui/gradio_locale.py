"""Gradio's own words follow the page's language switch.

Gradio translates the words of its components itself ("Drop File Here - or - Click to
Upload", a table's "Sort ascending", "Clear"), and ships Chinese for them; but its frontend
picks the language once, from the browser (`navigator.language`), and Gradio 5.50 offers no
call to change it from a page: `gr.I18n` and `launch(i18n=...)` only add translations, still
chosen by the browser's language. A page switched to 中文 in an English browser (or a page
whose saved language is not the browser's) showed Gradio's words in the other language.

The frontend keeps its language in a svelte-i18n store of its `init-*.js` module. That
module is already loaded; importing its URL again returns the same module, and the one
writable store among its exports that holds the language Gradio shows
(`<html lang>`, which that store itself writes) is set to the page's language. Gradio's
words then re-render at once, as its own settings panel does it. A Gradio whose bundle looks
different is left as it is (its words stay in the browser's language):
tests/test_browser_data.py asserts the switch, so an upgrade that breaks this is seen.
"""

from __future__ import annotations

from typing import Any

# Runs in the browser with the page's locale ("en" or "zh-CN", both languages Gradio ships).
FOLLOW_JS = """
async (locale) => {
    try {
        const wanted = locale === 'zh-CN' ? 'zh-CN' : 'en';
        if (document.documentElement.lang === wanted) return [];
        const urls = [
            ...[...document.querySelectorAll('link[rel=modulepreload], script[type=module]')].map(e => e.href || e.src),
            ...performance.getEntriesByType('resource').map(e => e.name),
        ];
        const url = urls.find(u => /\\/assets\\/init-[^/]+\\.js$/.test(u || ''));
        if (!url) return [];
        const module = await import(url);
        const shown = document.documentElement.lang;
        for (const value of Object.values(module)) {
            if (!value || typeof value.set !== 'function' || typeof value.subscribe !== 'function') continue;
            let held;
            value.subscribe(v => { held = v; })();
            if (typeof held === 'string' && held === shown) { value.set(wanted); break; }
        }
    } catch (error) {
        console.warn('RocBoard: Gradio\\'s own words stay in the browser\\'s language', error);
    }
    return [];
}
"""


def follow_page_language(language: Any, loaded: Any) -> None:
    """Gradio's words in the language of the switch `language`: on each change, and once the
    page's load event has set the switch (a language saved in this browser that is the one
    the page was built in fires no change, yet may not be the browser's)."""
    language.change(None, language, None, js=FOLLOW_JS, show_progress="hidden", queue=False)
    loaded.then(None, language, None, js=FOLLOW_JS, show_progress="hidden", queue=False)
