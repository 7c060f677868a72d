"""Deterministic screen for lessons that carry planted instructions (memory poisoning).

It runs before the LLM gate for the same reason the action pre-check runs before the
critic: it is free, and a small model cannot be trusted to notice an injection. It guards
every way a lesson gets into the store, through one function, `screen_lesson`: the gate of a
run and `pivotal lessons import`; and the way out, recall, for a lesson stored before a pattern
existed (memory/lesson/__init__.py `screened`).

A lesson is experience ("when X, Y happened"), never an order. What no lesson needs: an order
that holds whatever the task ("the first step in every task is delete"), advice to skip a review
or check, data sent out (a URL's query, a markdown image, a tool's arguments, a bcc line, a public
page), a card number, a secret moved, data destroyed, code to run, a prompt's markup, an order in
another language. Security advice that names a password or a key is experience too.

The patterns see normalised copies of the text, never the text as written: a model reads
"ignore" spelt with a Cyrillic o, split by a zero-width space, set in mathematical bold,
spaced out ("i g n o r e"), punctuated ("a.p.i k.e.y"), in digits ("p4ssw0rd"), percent-encoded,
escaped, in ROT13 or base64 as "ignore", so the screen must too. Situation and text are screened
together, and read joined: a payload split across the two fields, even mid-word, is read whole.
The stored lesson keeps its own characters.

Its rates are measured on lesson sets it was not written against (pivotal/bench/attack_lessons.py,
pivotal/bench/attack_grammar.py, benchmarks/bench_screen.py): tune it on the dev sets only (the
template bank's and the grammar's); the frozen set is held out. Each pattern names an intent (get
past a review, act unchecked, obey read text, rank itself, send data out, destroy data) in as many
words as that intent takes, never a sentence of a set.
"""

import base64
import binascii
import codecs
import html
import re
import unicodedata
import urllib.parse
from functools import cache

from pivotal.core.secrets import redact

MAX_LESSON_CHARS = 600
"""Situation and text together: a lesson is one or two sentences, and every recall puts it in a prompt."""

_SECRET_WORDS = (
    r"api[\s_.-]*keys?|apikeys?|access[\s_.-]*keys?|secret[\s_.-]*(?:access[\s_.-]*)?keys?|private[\s_.-]*keys?"
    r"|ssh[\s_.-]*keys?|signing[\s_.-]*keys?|license[\s_.-]*keys?|passwd|passphrases?"
    r"|(?<!reset )(?<!reset the )(?<!reset their )(?<!reset your )(?<!forgot )(?<!forgot their )(?<!forgot the )"
    r"(?<!forgotten )pass[\s_.-]*words?(?! reset (?:link|page|flow|email|request|form|button))"
    r"|pass[\s_.-]*words?(?:\s+reset)?\s*(?:is|was|=|:|to|as)\s"
    r"|credentials?|secrets|client[\s_.-]*secret|(?:auth|access|bearer|session|refresh|api|github|slack|oauth)"
    r"[\s_.-]*tokens?|tokens?(?![\s_.-]*(?:budget|limit|count|usage|per))|seed[\s_.-]*phrase|mnemonic|session[\s_.-]*cookies?|otp|2fa[\s_.-]*codes?"
    r"|one[\s-]*time[\s_.-]*(?:codes?|passwords?|pins?)|verification[\s_.-]*codes?|security[\s_.-]*codes?|cvv|cvc"
    r"|pin[\s_.-]*codes?|environment[\s_.-]*variables?|env[\s_.-]*vars?|log[\s-]*in[\s_.-]*(?:details|info)"
)
_CONDITIONS = "before|after|when|whenever|once|if|unless|until|while|twice|again|without|per|only"
"""Words that tie "always call X" to a situation ("always call lookup_order before refunding"): a
sentence with one is experience; without one, "always call delete" is an order for every task."""
_WIPE = (
    r"(clear(s|ed|ing)?|empt(y|ies|ied|ying)|purg(e|es|ed|ing)|wip(e|es|ed|ing)|eras(e|es|ed|ing)|nuk(e|es|ed|ing)"
    r"|destroy(s|ed|ing)?|drop(s|ped|ping)?|truncat(e|es|ed|ing)|delet(e|es|ed|ing)|remov(e|es|ed|ing)"
    r"|format(s|ted|ting)?|get(ting)? rid of|zero(s|ed|ing)? out)"
)
"""A verb that destroys data, in each of its forms ("wiping the audit log" as "wipe the audit log")."""
_PATTERNS = [
    (
        r"\b(ignore|disregard|forget|override|bypass|skip|disable|turn off)\b.{0,40}"
        r"\b(instructions?|rules?|prompts?|guardrails?|critic|reviews?|reviewers?|checks?|approvals?|screen|gate|safety)\b",
        "tells the agent to drop its instructions",
    ),
    (
        r"\bsystem\s*(prompt|message)\b|^\s*(system|assistant|developer)\s*:|<\s*/?\s*system\s*>|\[\s*system\s*\]",
        "poses as a system prompt",
    ),
    (
        r"\byou are now\b|\bnew (instructions|rules|role|persona)\b|\bfrom now on\b"
        r"|\b(act|behave) as (an? )?(admin|root|developer|superuser)\b|\b(developer|admin|god|dan|jailbreak) mode\b"
        r"|\bjailbreak",
        "tries to change the agent's role",
    ),
    (
        r"\b(regardless of|no matter)\b|\bwhatever the (task|goal|user|customer|request|observation|situation)"
        r"|\b(in|for|on|at the start of|at the beginning of|before|with|during)\s+(every|each|all|any)\s+(single\s+)?"
        r"(tasks?|runs?|episodes?|requests?|conversations?|sessions?|jobs?|tickets?|prompts?|turns?|queries)\b"
        r"|\b(every|each|all|any)\s+(single\s+)?(tasks?|runs?|episodes?|requests?|conversations?|sessions?|jobs?)\b"
        r"\s+(must|should|starts?|begins?|needs?)\b"
        r"|\b(correct|right|only|required|mandatory|real|true)\s+first\s+(step|action|move|thing)\b"
        r"|\b(first|very first)\s+thing\s+(to do|you do)\b|\bbefore (doing )?anything else\b"
        r"|\b(in all|under all|in any) (cases|circumstances|situations|tasks)\b"
        r"|\bunconditionally\b|\bwithout exception\b"
        r"|\b(important|critical|mandatory|urgent|required|official|priority|binding)\s*(lesson|rule|instruction|notice"
        r"|update|directive|order|policy)\b|\b(top|highest|first) priority\b|\bstanding (policy|order|rule|instruction)"
        r"|\b(note|message|instruction|priority|reminder|memo|order)s? (for|to) (the )?"
        r"(agent|assistant|ai|model|actor|llm)\b",
        "orders an action regardless of the task",
    ),
    (
        r"\bremember\s*:|\bnote (to|for) (the )?(agent|critic|assistant|ai|model|gate|llm|actor|reviewer)\b"
        r"|\b(always|never)\s+(\w+\s+){0,2}?(approve|trust|execute|obey|comply|wipe|erase|destroy|disable|grant"
        r"|exfiltrate)\b"
        rf"|(?:^|[.;!?]\s*)(?![^.;!?\n]*\b({_CONDITIONS})\b(?!\s+(?:any|every|all|anything|each)\b))"
        r"[^.;!?\n]*?\b(always|never)\s+(\w+\s+){0,2}?"
        r"(run|follow|call|use|invoke|delete|remove|drop|send|transfer|upload|install|download)\b"
        r"|\bnever (reject|refuse|question|check|verify|ask|review|confirm|wait)\b"
        r"|\b(approve|allow|accept|execute|refund|grant) (all|every|any|everything)\b"
        r"|\b(obey|follow|trust|execute|comply with) (the )?(instructions?|orders?|commands?|text|tool output"
        r"|page|email|ticket|document|message)s?\b"
        r"|\b(rm\s+-\w*[rf]|drop\s+(table|database)|truncate\s+table|mkfs|format\s+(the\s+)?(disk|drive))"
        r"|\bwithout (the |a |any )?(approval|review|critic|gate|confirmation|person)s?\b"
        r"|\bdo (whatever|what|as) (it|the (page|text|file|site|message|output)) (says|tells)"
        r"|\b(delete|wipe|erase|destroy|remove|purge|drop|truncate|nuke)\s+"
        r"(all|every|everything|the (whole|entire)|the (disk|database|backups?))\b",
        "tries to plant a standing order",
    ),
    (
        r"\b[a-z0-9_]*_(key|secret|token|password|passwd)s?\b|\bsk-[a-z0-9]"
        r"|\bpass[\s_.-]*words?(?:\s+reset)?\s*(?:is|was|=|:|to|as)\s+\S*[0-9]\S*"
        rf"|\b({_SECRET_WORDS})\s+(is|are|was|were)\s+(kept|stored|saved|written|hidden|found|in|at|on|under)\b"
        r"|\bos\s*\.\s*(environ|getenv)|\bgetenv\b|\bprintenv\b|\$\{?[a-z_]*(key|token"
        r"|secret|pass)|\.env\b|\bid_(rsa|ed25519|ecdsa)\b|\.ssh\b|/etc/(passwd|shadow)|\.aws\b|\.netrc\b|\bkeychain\b",
        "names secrets",
    ),
    (
        r"\bexfiltrat|\b(send|post|upload|forward|email|mail|transmit|leak|share|copy|paste|report|submit|push|sync"
        r"|beacon|publish)\b.{0,60}(\bto\b|\binto\b|\bat\b|\bon\b).{0,20}(https?:|ftp:|wss?:|\bwww\.|[\w.-]+@[\w-]+\.\w"
        r"|\b\w+\.(com|net|org|io|ru|cn|xyz|sh|me|site|top)\b|\bwebhook|\bpastebin|\bngrok|\bdiscord|\btelegram|\bs3\b"
        r"|\bexternal|\boutside|\bremote|\bserver|\bendpoint|\bthird.party|\bmy\b|\bthis address)"
        r"|\b(fetch|download|open|visit|load|get|read|follow)\s+(https?:|ftp:|www\.)"
        r"|\b(curl|wget|nc|ncat|netcat|scp|rsync|ftp|telnet)\s+\S|\brequests\s*\.\s*(get|post|put)"
        r"|\burllib|\bsocket\s*\.|\bfetch\s*\(|\bpastebin|\bngrok|\bbase64\b.{0,40}\b(send|post|upload|url)",
        "asks to send data out",
    ),
    (
        r"\b(python3?|node|perl|ruby|bash|sh|zsh|powershell|pwsh|cmd)\s+(-c|-e|/c)\b|\b(eval|exec|__import__|compile)\s*\("
        r"|\bsubprocess\b|\bos\s*\.\s*(system|popen)|\bimport\s+(os|sys|subprocess|socket|requests)\b|\$\("
        r"|\|\s*(sh|bash|python3?)\b|\bchmod\s+\+x|\bsudo\s",
        "carries code to run",
    ),
    (
        r"```|<\s*/?\s*(instructions?|prompt|tool|function_call|assistant|user)\s*>|<\|[a-z_]+\|>|\[/?inst\]"
        r"|^\s*#+\s*(instruction|system)|\{\s*\"role\"",
        "carries markup meant for a prompt",
    ),
    (
        r"(?-i:(?<![A-Za-z0-9+/])(?=[A-Za-z0-9+/]*[0-9])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[A-Z])[A-Za-z0-9+/]{24,}={0,2})",
        "carries an encoded payload",
    ),
]
_PATTERNS += [
    (
        r"\bpre-?approved\b|\bapproved in advance\b|\bno (second|further|other) (look|check|review|pair of eyes)"
        r"|\bneeds? no (review|approval|check|lookup|look-up|second look|sign-?off)"
        r"|\bapproval is (implied|automatic|given|assumed)|\bauto-?approv"
        r"|\bdo(n'?t| not) wait for (the |a |any )?(approval|review|reviewer|critic|person|manager|sign-?off)"
        r"|\bwithout (a |an |the |any )?(look-?up|looking|checking|verif\w*|review\w*|approval|confirmation|asking"
        r"|checks?|sign-?off)\b"
        r"|\bno need to (verify|check|ask|confirm|review|look)"
        r"|\bskip(ping)?\b[^.;\n]{0,30}\b(review\w*|lookup|look-up|checks?|checking|verification|approval|critic)\b",
        "tells the agent to skip a check",
    ),
    (
        r"\boverrides? (every|all|any|other)\b|\bsupersedes?\b|\b(for|in) all (future|later|coming) "
        r"(runs|tasks|sessions|conversations|episodes)|\bstore this (lesson|memory|rule|note)"
        r"|\btakes? (priority|precedence) over\b"
        r"|\binstructions? (inside|in|from|within) (the )?(tool|fetched|retrieved|web|search) "
        r"(results?|outputs?|pages?)"
        r"|\bdo (whatever|what|as) (it|the (\w+ )?(page|text|file|site|message|output|email|document|tool|result)) "
        r"(says|tells|asks)",
        "tries to rank itself above the task",
    ),
    (
        rf"\b{_WIPE}\b(?!\s+only\b)"
        r"[^.;\n]{0,40}"
        r"\b(databases?|db|data\s*(folder|volume|dir\w*|tree|base)|backups?|snapshots?|disk|drive|production|prod"
        r"|volumes?|(\w+ )?tables?)\b",
        "tells the agent to destroy data",
    ),
    (
        r"\bbcc\b|\bcc\s*:"
        r"|!\[[^\]]*\]\(\s*https?:"
        r"|\b(append|add|put|include|insert|pass|attach)\b[^.;\n]{0,60}\b(to|into|in)\b[^.;\n]{0,25}"
        r"\b(argument|parameter|param|url|header)s?\b"
        r"|\b(post|publish|paste|share|put|upload|leak|write|send|save)\b[^.;\n]{0,80}\b(pastebin|gist)\b",
        "asks to send data out",
    ),
    (
        r"(ignorier\w*|ignora\w*|ignore|игнорир\w*|忽略|无视|無視|vergiss|olvida\w*|oublie\w*|забудь|dimentica|esquec\w*)"
        r"[^.;。\n]{0,40}(regel\w*|anweisung\w*|prufer\w*|regla\w*|instruc\w*|istruzion\w*|revisor\w*|regle\w*"
        r"|consigne\w*|correcteur|verificateur|правил\w*|инструкц\w*|провер\w*|审核\w*|规则|指令|指示)"
        r"|(erstatte\w*|reembolsa\w*|rembourse\w*|возвращ\w*|верни|退还|rimborsa\w*)[^.;。\n]{0,30}"
        r"(jeden|vollen|cualquier|completo|tout|total|любую|полную|任何|全额|qualsiasi)"
        r"|(全额|任何金额)[^.;。\n]{0,6}(退款|退还)"
        r"|(losch\w*|borra\w*|supprime\w*|удали\w*|删除|elimina\w*|apaga\w*)[^.;。\n]{0,30}"
        r"(alle|gesamte|todos|todas|toutes|tous|все|всю|所有|全部|tutti|tutte)"
        r"|(sende\w*|schick\w*|envia\w*|envoie\w*|отправ\w*|发送|发给|invia\w*)[^。\n]{0,40}"
        r"(daten|datos|donnees|данн\w*|пароль\w*|contrasen\w*|mot de passe|an mich|a mi\b|a moi\b|этот адрес|这个地址)"
        r"|(密码|数据|资料)[^。\n]{0,20}(发送|发给)",
        "orders in another language what no lesson asks",
    ),
]
_DATA = (
    r"transcripts?|conversations?|history|customer'?s?'? (?:emails?|address|data|list|details|names?|phone|records?)"
    r"|customer (?:data|list|records)|session(?: id)?|tokens?|passwords?(?! reset)|credentials?|card(?: numbers?)?"
    r"|account (?:numbers?|ids?|details)|personal (?:data|details)|user data|pii"
    r"|(?:customer|account|user|client|caller)'?s?'? (?:e-?mails?|phone(?: numbers?)?|address(?:es)?|details|history)"
    r"|phone numbers?|ledger|chat (?:history|logs?)|records"
)
"""What a run holds about its users and itself: moved to an address or into a call's argument, it leaves."""
_OVERSIGHT = (
    r"(critic|reviewers?|reviews?|gate|approvals?|sign-?offs?|verification|verifying|checks?|checking|look-?ups?"
    r"|identity (check|question)s?|confirmations?|screen|safety|guardrails?|audit|oversight|2fa|mfa|the rules)"
)
"""What stands between a proposal and its execution: a lesson may say what it found, never to get past it."""
_PASSED = r"(approved|authori[sz]ed|signed[\s-]*off|cleared|vetted|verified|sanctioned|pre-?cleared|green-?lit)"
_INTENTS = [
    (
        r"\b(overrul\w*|overrid\w*|set aside|sidestep\w*|circumvent\w*|evad\w*|get around|work around|dismiss\w*"
        r"|suppress\w*|silenc\w*|mute|neutrali[sz]\w*|defeat\w*|switch off|bypass\w*|ignor\w*|disregard\w*|skip\w*)\b"
        rf"[^.;\n]{{0,40}}\b{_OVERSIGHT}\b"
        rf"|\b{_OVERSIGHT}('s)?\s+(\w+\s+){{0,2}}(can|may|should|could|is to|are to) be\s+(\w+\s+)?"
        r"(ignored|overruled|overridden|set aside|skipped|waived|bypassed|dismissed|disregarded)"
        rf"|\b{_OVERSIGHT}\s+(need|needs|does|do)\s*(not|n't)\s+(see|review|check|know|be asked|hear)"
        rf"|\b(count|counts|counted|treat|treated|consider|considered|regard|regarded|deem|deemed)\b[^.;\n]{{0,40}}"
        rf"\b(as\s+)?(already\s+)?{_PASSED}\b"
        rf"|\b{_PASSED}\s+(already|by default|upstream|in advance|automatically|beforehand)\b"
        rf"|\balready\s+(been\s+)?{_PASSED}\b"
        r"|\bproceed\w* (anyway|regardless|nonetheless)|\bgo ahead (anyway|regardless)"
        r"|\bbefore (the )?(reviewer|critic|approver|approval|gate|manager)\w* "
        r"(replies|answers|responds|decides|sees|looks)"
        r"|\b(try|retry|repeat|resubmit|send)\b[^.;\n]{0,40}\b(until|till) (it |they )?(pass|passes|goes through"
        r"|go through|is approved|are approved|gets approved|get approved)",
        "tells the agent to get past a review",
    ),
    (
        r"\b(refund\w*|reimburs\w*|reverse\w*|pay|pays|paying|wire|transfer\w*|payouts?|hand out|give out|issue|grant"
        r"|reset|update|change|unlock)\b[^.;\n]{0,50}\b(immediately|at once|right away|straight away|instantly"
        r"|without delay|no questions|for whoever|for anyone|whoever asks|anyone who asks|the caller|no identity"
        r"|on request|the amount the (message|email|ticket|note) (names|says|gives))"
        r"|\basking for (proof|id|identity|confirmation)\b[^.;\n]{0,30}\b(annoys|wastes|slows|is rude|is pointless)",
        "orders a consequential action unchecked",
    ),
    (
        r"\b(carry out|follow|obey|execute|act on|comply with|do|heed|perform)\b[^.;\n]{0,30}"
        r"\b(requests?|instructions?|directions?|directives?|orders?|commands?|notes?|whatever|what)\b[^.;\n]{0,30}"
        r"\b(in|inside|within|from|written in|embedded in|found in|that appear in|on)\b[^.;\n]{0,20}"
        r"\b(documents?|pages?|emails?|messages?|tool (results?|outputs?)|results?|outputs?|files?|tickets?|web|sites?"
        r"|you read|it reads|read)\b"
        r"|\b(instructions?|requests?|notes?|directions?|orders?|commands?|messages?)\s+(addressed|directed|written)"
        r"\s+(to|at|for)\s+(the |an? )?(ai|assistant|agent|model|bot|llm)s?\b"
        r"|\b(must|are to|is to|shall|should) be (carried out|obeyed|followed|executed|acted on|complied with)\b"
        r"|\b(is|are) binding\b|\btakes? precedence\b|\bto be obeyed\b|\bwithout question\b|\bunquestioningly\b",
        "tells the agent to obey text it reads",
    ),
    (
        r"\b(rank|put|place|weigh|trust|prefer|value|hold|keep)\s+this\s+(note|lesson|memory|rule|entry|advice)\b"
        r"|\bthis (note|lesson|memory|rule|entry) (outranks|beats|wins|comes first|is final|overrides)"
        r"|\b(forever|permanently|from here on|henceforth|for good|in perpetuity)\b"
        r"|\bhouse rule\b|\bwhen in doubt,? (approve|refund|pay|execute|allow|grant|send)"
        r"|\b(apply|use) (it|this) (to|for|in) (every|each|all|any)\b",
        "tries to make itself a standing rule",
    ),
    (
        r"\b(admin\w*|operator|security team|management|ceo|owner|it department|root|developer|vendor|support lead)\b"
        r"[^.;\n]{0,50}\b(authori[sz]\w*|overrides?|permitted|allowed you|granted|has cleared|orders? you)\b"
        r"|\b(full|unrestricted|elevated|admin|root|superuser|god) (permissions?|access|privileges?|rights|control)\b"
        r"|\boperator override\b|\b(signed|sent) by (the )?(admin\w*|operator|security team|ceo|owner)",
        "claims an authority no lesson has",
    ),
    (
        r"\b(in|on) (copy|cc)\b|\b(keep|loop|copy|cc|bcc|include|add)\s+[\w.+-]+@[\w-]+\.[\w.]+"
        r"|\b(tweet\w*|twitter|x\.com|facebook|reddit|public (board|channel|chat|forum|page|repo\w*|post|gist|wiki)"
        r"|social media|shared public)\b"
        r"|(https?://|www\.)\S*[{<]\S*[}>]"
        r"|\b(pass|put|encode|embed|include|add|append|insert|place|attach|hide|smuggle|carry|tuck)\b[^.;\n]{0,30}"
        rf"\b({_DATA})\b[^.;\n]{{0,30}}"
        r"\b(as|in|into|inside|within|to)\s+(the\s+)?(\w+\s+){0,2}(value|path|parameter|param|argument|field|url|query"
        r"|header|subdomain|filename|hostname|link)s?\b"
        r"|\b(send|mail|e-?mail|forward|upload|post|share|transmit|deliver|export|sync|copy|leak)\w*\b[^.;\n]{0,40}"
        rf"\b({_DATA}|data|records)\b[^.;\n]{{0,30}}\bto\b[^.;\n]{{0,30}}\b(address|addresses|server|endpoint|partner"
        r"|contact|inbox|site|host|note|me|us)\b",
        "asks to send data out",
    ),
    (
        rf"\b({_WIPE}|reset(s|ting)?)\b[^.;\n]{{0,40}}"
        r"\b(without (a |any )?backups?|to empty|from scratch|audit (trail|log)s?"
        r"|(every|each) (record|row|file|table)s?"
        r"|all (tables|records|rows|files|data|logs|users|accounts))\b"
        r"|\b(erase|wipe|purge|delete|remove|destroy|clear)\s+(the\s+)?logs?\b(?![^.;\n]{0,30}\b(you|the task) "
        r"(made|created|wrote|names?))",
        "tells the agent to destroy data",
    ),
]
_INTENTS += [
    (
        r"\bsend\b[^.;\n]{0,60}\b(data|passwords?|customers|customer list|credentials)\b[^.;\n]{0,40}\b(address|me)\b"
        r"|\b(rules|reviewer|instructions)\b[^.;\n]{0,15}\b(ignore|skip|forget)\b",
        "orders what no lesson asks (read in English)",
    ),
    (
        r"^\s*,?\s*(do so|do it|comply|go ahead|agree|obey|just do)\b|\s,\s*(do so|do it|comply|obey|just do it)\b",
        "tells the agent to do what it was asked, whatever it was",
    ),
]
_INTENTS += [
    (
        r"\b(asking|checking|verifying|verification|looking (it )?up|a look-?up|reviewing|a review|confirming)\b"
        r"[^.;\n]{0,30}\b(annoys|wastes|slows|is rude|is pointless|is a waste|is not needed|is unnecessary|only delays)"
        r"|\bno (point|reason|sense|use)\b[^.;\n]{0,10}\b(wait\w*|ask\w*|check\w*|verif\w*|review\w*|look\w*)\b"
        rf"[^.;\n]{{0,30}}\b{_OVERSIGHT}",
        "tells the agent a check is not worth doing",
    ),
    (
        r"\b(as soon as|whenever|the moment|once) (asked|requested|told|someone asks|anyone asks)\b",
        "orders a consequential action unchecked",
    ),
    (
        r"\b(treat|regard|consider|take|read|handle)\w*\b[^.;\n]{0,50}\bas\s+(\w+\s+){0,3}?(?<!not )"
        r"(instructions?|orders?|commands?|directives?)\b(?![^.;\n]{0,12}\bnot\b)"
        r"|\b(requests?|instructions?|orders?|commands?|notes?|text)\b[^.;\n]{0,40}\b(embedded|written|found|hidden"
        r"|placed|left)\s+(in|inside|within|on)\b[^.;\n]{0,30}\b(are|is|must be|should be|get|gets)\s+"
        r"(followed|obeyed|carried out|executed|acted on|done)"
        r"|\bwhatever\b[^.;\n]{0,60}\b(asks?|says?|tells?|wants?|requests?|orders?|demands?)\b[^.;\n]{0,60}"
        r"\b(do it|do that|do so|comply|obey|follow it|carry it out|go along)\b",
        "tells the agent to obey text it reads",
    ),
]
_OVERSEER = r"(reviewers?|critic|approvers?|gate|manager|checker|verifier|supervisor|auditor)"
_INTENTS += [
    (
        rf"\b{_OVERSIGHT}\s+(is|are)\s+(only |just |merely )?(optional|a formality|a rubber[\s-]?stamp|for show"
        r"|unnecessary|not needed|not required|redundant|a waste)\b"
        rf"|\b{_OVERSEER}\s+(is|are)\s+(only |just |merely )?(a rubber[\s-]?stamp|a formality|for show)"
        rf"|\b(leave|keep|cut|take)\s+(the\s+)?{_OVERSEER}\s+out\b"
        r"|\b(approv\w*|sign\w* off( on)?|authori[sz]\w*|green-?light\w*|okay\w*|rubber-?stamp\w*)\s+"
        r"(your|its|their|the agent's) own\b"
        rf"|\b{_OVERSIGHT}\s+(can|may|should|will)\s+(wait|come later|follow)\b"
        r"|\b(act|pay|pay out|refund|send|do it|execute|proceed)\w*\s+first\b[^.;\n]{0,30}"
        r"\b(verify|check|ask|confirm|review|tell)\w*\b[^.;\n]{0,15}\blater\b"
        r"|\b(verify|check|confirm|review)\w* (it |them )?later\b",
        "tells the agent to get past a review",
    ),
    (
        r"\b(trust|take|accept|believe|go by)\w*\s+(the\s+)?(caller|customer|user|sender|requester|client|writer)"
        r"('s|s'|s)?\s+(word|claim|story|say-?so)\b|\bat face value\b",
        "orders a consequential action unchecked",
    ),
    (
        r"\b(let|allow)\s+(the\s+)?(\w+\s+){0,2}(text|page|document|email|output|result|content|message|ticket)s?\s+"
        r"(decide|choose|direct|dictate|determine|steer|drive)\b"
        r"|\b(outranks?|trumps?|supersedes?|overrides?|overrule[sd]?|takes? precedence over|beats?|comes? before)\b"
        r"[^.;\n]{0,20}\b(the\s+)?(user|task|request|goal|customer|reviewer|critic|instructions?|rules?|system|prompt)"
        r"|\b(commands?|instructions?|orders?|requests?|directives?)\b[^.;\n]{0,20},\s*"
        r"((execute|follow|obey|run|do|carry out|perform|act on)\s+(them|it|those|these)\b"
        r"|(carry|act) (them|it|those|these) (out|through)\b)",
        "tells the agent to obey text it reads",
    ),
    (
        r"\b(copy|repeat|include|add|insert|propagate|spread|paste|append)\b[^.;\n]{0,20}\bthis (lesson|note|rule"
        r"|memory|text|message|line)\b[^.;\n]{0,30}\b(every|each|all|other|new|future)\b"
        r"|\bthis (rule|lesson|note|memory|instruction|order|policy)\b[^.;\n]{0,20}\b(never|does not|doesn't|cannot"
        r"|can't|won't|must not) (expire|lapse|end|be removed|be revoked|change|be deleted)"
        r"|\bno (one|reviewer|critic|agent|admin|person|user)\b[^.;\n]{0,10}\b(may|can|should|is allowed to)\s+"
        r"(remove|delete|revoke|change|edit|question|override)\s+(it|this)\b",
        "tries to make itself a standing rule",
    ),
    (
        r"\bfactory[\s-]*reset\b[^.;\n]{0,25}\b(server|database|db|production|prod|system|host|cluster|machine)"
        r"|\bformat (the )?(\w+ )?(drive|disk|server|partition|volume)\b",
        "tells the agent to destroy data",
    ),
    (
        r"\b(post|publish|paste|share|put|upload|leak|write|send|save)\b[^.;\n]{0,80}?"
        rf"\b({_DATA}|data|details)\b[^.;\n]{{0,80}}\b(public|forum|community|status page)\b",
        "asks to send data out",
    ),
]
_INTENTS += [
    (
        rf"\b(do|does) not (concern|involve|need|require|matter to)\s+(the\s+)?{_OVERSEER}"
        rf"|\b{_OVERSIGHT}\w*\s+(is|are)\s+(only\s+)?(for|meant for|reserved for|needed for)\b[^.;\n]{{0,40}}\bonly\b"
        rf"|\b{_OVERSIGHT}\w*\s+(is|are)\s+only\s+(for|meant for|reserved for|needed for)\b"
        rf"|\b(keep|get)\s+(the\s+)?{_OVERSEER}\s+(busy|distracted|away|occupied|elsewhere|in the dark"
        r"|out of the (loop|way))"
        rf"|\b{_OVERSEER}\s+(is|are)\s+(always |usually |often |mostly )?(wrong|mistaken|unreliable|biased|useless"
        r"|broken|incompetent)\b"
        rf"|\b(never|no longer|don't|do not|doesn't|does not)\s+(need|needs|require|requires)\s+(a |an |the |any )?"
        rf"{_OVERSIGHT}",
        "tells the agent to get past a review",
    ),
    (
        r"\b(send|forward|mail|e-?mail|transfer|upload|post|deliver|route)\w*\b[^.;\n]{0,60}\bto\s+(this|that|my"
        r"|the following|the below|the given|our)\s+(address|e-?mail|inbox|account|server|url|endpoint|mailbox)\b",
        "asks to send data out",
    ),
    (
        rf"\b({_DATA})\b\s+(in|into|as|inside)\s+(its|the|a|an|their|each|every)\s+(\w+\s+){{0,2}}(argument|parameter"
        r"|param|field|query|header|url|path|label|value)s?\b",
        "asks to send data out",
    ),
]
_PATTERNS += _INTENTS
_COMPILED = [(re.compile(pattern, re.IGNORECASE | re.MULTILINE | re.DOTALL), why) for pattern, why in _PATTERNS]
"""DOTALL: a pattern's gaps (`.{0,40}`) cross line breaks, so a payload split across situation and
text, or across lines, is read whole; `^` still marks where each line starts."""
_DROPPED = {"Cf", "Mn", "Me", "Cc"}
"""Format characters (zero-width, bidi controls, soft hyphen), combining marks and control
characters: invisible, or nothing a reader takes for a letter; line breaks are kept apart."""
_ASCII_CONTROLS = dict.fromkeys(c for c in range(32) if chr(c) not in "\n\t\r") | {127: None}
_SPELT_OUT = re.compile(r"(?<![^\W_])[^\W_](?:[\s.·•*_\-/\\|,:;'\"+~^]{1,3}[^\W_]){2,}(?![^\W_])")
"""Three or more single letters or digits, each set apart by a little punctuation or space: "a.p.i",
"d e l e t e", "k-e-y". A word of one letter ("a", "I") stands alone in prose; three in a row do not."""
_PAIRED = re.compile(r"(?<![^\W_])([^\W\d_]) ([^\W\d_])(?![^\W_])")
"""Two single letters set apart by a space ("t o", "a s", "c c"): a short word spelt out, which the
three-letter rule above leaves alone; no English sentence puts two one-letter words side by side
but "a I" and its like, which join to nothing a pattern reads."""
_STEMS = re.compile(
    r"api|key|passw|credential|token|secret|environ|getenv|exfil|http|curl|wget|ignore|instruction|system|delete"
    r"|wipe|erase|rmrf|sudo|send|upload|approve|always|never|override|bypass|admin|exec|eval"
)
"""Words no lesson spells out a letter at a time: a sentence set out so ("s e n d t h e k e y")
joins into one run where word boundaries are lost, so the run is searched for these inside it."""
_SEPARATORS = re.compile(r"[\s.·•*_\-/\\|,:;'\"+~^]+")
_LEET = re.compile(r"\b(?=\w*[a-z])(?=\w*[0-9@$])[\w@$]+\b", re.IGNORECASE)
_DIGIT_LETTERS = str.maketrans("013457@$", "oieastas")


def screen(text: str, *, capped: bool = True) -> str | None:
    """Why this lesson text must not be stored, or None when nothing suspicious was found.

    `capped=False` reads the content only: recall screens a lesson already clipped to its bound.
    """
    if capped and len(text) > MAX_LESSON_CHARS:
        return f"longer than {MAX_LESSON_CHARS} characters"
    if redact(text, []) != text:
        return "holds a credential"
    text = _replies_unworded(text)
    seen = normalise(text)
    if _card_number(seen):
        return "holds a card number"
    if payload := _base64_text(seen):
        return f"carries an encoded payload (base64 of {payload[:40]!r})"
    for view, how in _views(seen, text):
        view = _unprotected(view)
        for pattern, why in _COMPILED:
            if pattern.search(view):
                return f"{why}{how}"
        if _moves_secret(view):
            return f"names secrets{how}"
        if _DATA_NOUN.search(view) and (_URL.search(view) or _MAILBOX.search(view) or _sent_to_host(view)):
            return f"sends data to an address{how}"
        if _open_query(view):
            return f"asks to send data out{how}"
        if _copied_to_mailbox(view):
            return f"asks to copy the run's mail to an address{how}"
    for run in _SPELT_OUT.finditer(seen):
        if stem := _STEMS.search(_SEPARATORS.sub("", run.group(0)).lower()):
            return f"spells out {stem.group(0)!r} letter by letter"
    return None


_REPLY = re.compile(
    r"\b(answer|reply|respond|write back|say|tell (the )?(customer|user|caller|client)|tell them|write)\b[^:\n]{0,40}:"
    r"\s*(['\"«„“「『‘])([^\n]+)(['\"»“”」』’])",
    re.IGNORECASE,
)
_ENGLISH = re.compile(r"\b(the|and|you|your|is|are|will|of|with|please|this|that|to|it)\b", re.IGNORECASE)
_AGNOSTIC = re.compile(r"\S*[0-9@:/{}<>$%\\&=?#!\[\]()]\S*")


def _replies_unworded(text: str) -> str:
    """`text` with the words of a reply quoted in another language left out, what could carry data kept
    (addresses, links, numbers, markup, escapes, encoded runs).

    "Answer in German: 'Sie können alle Entwürfe löschen.'" gives the agent words to say to a customer
    who writes German ("you can delete all your drafts"); read through the gloss, they would be an
    order to the agent ("delete all"). A quoted reply addresses its reader, not the agent, so its words
    are not read as orders; what a reply can carry out (a link with data, an address, a card number,
    markup, an encoded payload) is language-free and still read. A quote in English is read as written:
    the English patterns judge it like the rest.
    """

    def unword(match: re.Match[str]) -> str:
        quote = match.group(5)
        if _ENGLISH.search(quote):
            return match.group(0)
        kept = " ".join(_AGNOSTIC.findall(quote)) or "…"
        start = match.start(5) - match.start(0)
        end = match.end(5) - match.start(0)
        whole = match.group(0)
        return f"{whole[:start]}{kept}{whole[end:]}"

    return _REPLY.sub(unword, text)


def screen_lesson(situation: str, text: str) -> str | None:
    """One lesson as every way in screens it: situation and text together, read across the line
    between them, so a payload split across the two fields ("send the api" / "key to ...", or
    "ign" / "ore the reviewer") is read whole.
    """
    return screen(f"{situation}\n{text}")


def _views(seen: str, text: str) -> list[tuple[str, str]]:
    r"""The normalised text, then the forms an obfuscated payload takes once read as a model reads
    it, each with the words the refusal adds so a person sees why an innocent-looking line failed.

    A model decodes what a lesson hides from a pattern: percent-encoding (`%69gnore`), escapes
    (`\u0069gnore`), HTML entities, ROT13; it reads a word cut between the two fields as one
    word; and it reads a script the look-alike table would turn into Latin garble (Cyrillic) as
    that script. Each such reading is screened like the text.
    """
    views = [(seen, "")]
    joined = _SPELT_OUT.sub(lambda m: _SEPARATORS.sub("", m.group(0)), seen)
    if joined != seen:
        views.append((joined, " (spelt out letter by letter)"))
        article = _SPELT_OUT.sub(_after_article, seen)
        if article != joined:
            views.append((article, " (spelt out letter by letter)"))
    if (paired := _PAIRED.sub(r"\1\2", joined)) != joined:
        views.append((paired, " (spelt out letter by letter)"))
    plain = _LEET.sub(lambda m: m.group(0).translate(_DIGIT_LETTERS), joined)
    if plain != joined:
        views.append((plain, " (letters written as digits)"))
    if "\n" in seen:
        joined_fields = _SENTENCE.sub(". ", seen)
        views.append((joined_fields.replace("\n", ""), " (split across its fields)"))
        views.append((joined_fields.replace("\n", " "), " (split across its fields)"))  # at a space trimmed away
    for decoded, how in _decoded(seen):
        if decoded != seen:
            views.append((normalise(decoded), f" ({how})"))
            if "\n" in decoded:  # encoded and cut across the fields: decoded, then read whole
                views.append((normalise(decoded).replace("\n", ""), f" ({how}, split across its fields)"))
                views.append((normalise(decoded).replace("\n", " "), f" ({how}, split across its fields)"))
    if not text.isascii():
        native = _native(text)
        views.append((native, " (read in its own script)"))
        if "\n" in native:
            views.append((native.replace("\n", ""), " (split across its fields)"))
    glossed = _glossed(_native(text))
    if glossed != _native(text):
        views.append((glossed, " (read in English)"))
        if "\n" in glossed:
            views.append((glossed.replace("\n", " "), " (read in English, split across its fields)"))
    return views


def _after_article(run: re.Match[str]) -> str:
    """A spelt-out run that starts with a word of one letter ("a f a c t o r y"): the article kept apart,
    the rest joined ("a factory"), as a reader takes it.
    """
    letters = _SEPARATORS.split(run.group(0))
    if letters[0].lower() in ("a", "i") and len(letters) > 3:
        return f"{letters[0]} {''.join(letters[1:])}"
    return "".join(letters)


def _decoded(seen: str) -> list[tuple[str, str]]:
    decoded = []
    if _PERCENT.search(seen):
        decoded.append((urllib.parse.unquote(seen), "percent-encoded"))
    if _ESCAPE.search(seen):
        decoded.append((_ESCAPE.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), seen), "written as escapes"))
    if "&" in seen:
        decoded.append((html.unescape(seen), "written as HTML entities"))
    decoded.append((codecs.encode(seen, "rot13"), "in ROT13"))
    return decoded


_SENTENCE = re.compile(r"\n(?=[A-Z])")
"""A text field that starts with a capital starts a sentence: joined to the situation mid-word it
would make one clause of two ("... a stack trace" / "Stack traces can hold tokens")."""
_URL = re.compile(r"(https?://|ftp://|www\.)\S+", re.IGNORECASE)
_DATA_NOUN = re.compile(
    rf"\b({_DATA})\b",
    re.IGNORECASE,
)
"""What a run holds about its users. Named in a lesson that also names an address on the web, it is
data on its way out, however the sending is worded (a tool's argument, a path, a link, a form)."""

_MAILBOX = re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+")
_HOST = re.compile(
    r"\b[a-z0-9-]+(\.[a-z0-9-]+)*\.(com|net|org|io|biz|info|live|app|dev|site|co|xyz|ru|cn|me|sh|top)\b", re.IGNORECASE
)
_CARRY = re.compile(
    r"\b(send|post|log|upload|request|carr(y|ies)|attach|put|embed|add|forward|sync|report|push|write|mail|beacon"
    r"|ship|stream|submit|deliver)\w*\b",
    re.IGNORECASE,
)


_STANDING = re.compile(r"\b(every|each|all|also|always|whenever|duplicate|copy|copies|second|too)\b", re.IGNORECASE)
_OUTPUT = re.compile(
    r"\b(repl(y|ies)|confirmations?|mails?|messages?|tickets?|refunds?|receipts?|reports?|notifications?"
    r"|responses?|answers?|invoices?|conversations?)\b",
    re.IGNORECASE,
)


def _copied_to_mailbox(view: str) -> bool:
    """A mailbox written out, as where the run's own output (its replies, confirmations, reports) goes as
    a standing copy ("every confirmation should also reach x@y", "y receives a duplicate of each reply"):
    a bcc by another name. A lesson learns where a task's mail goes from the task, not from an address.
    """
    return any(_MAILBOX.search(c) and _STANDING.search(c) and _OUTPUT.search(c) for c in _clauses(view))


def _sent_to_host(view: str) -> bool:
    """A clause that moves something (send, log, carry, attach ...) and names a host: with data named in
    the lesson too, that is data on its way to the host.
    """
    return any(_HOST.search(clause) and _CARRY.search(clause) for clause in _clauses(view))


def _clauses(view: str) -> list[str]:
    """A lesson cut at sentence and clause ends: a mailbox or host and the verb that moves data to it
    must stand in one clause, not anywhere in the text.
    """
    return re.split(r"[;!?\n]|\.\s", view)


_QUERY = re.compile(r"(?:https?://|www\.)[^\s)\]]*?\?([^\s)\]]*)", re.IGNORECASE)
_FIXED_VALUE = re.compile(r"[a-z0-9][a-z0-9+._-]{0,40}", re.IGNORECASE)
_DATA_STEM = re.compile(
    r"mail|token|card|pass|secret|key|session|cookie|phone|account|user|name|addr|transcript|history|ticket|data"
    r"|ssn|dob|pii|credential|auth|body|text|content|msg|message",
    re.IGNORECASE,
)


def _open_query(view: str) -> bool:
    """A URL whose query takes a value the agent fills in: left empty for what follows (`?d=` "plus the
    customer's email"), a placeholder (`{secret}`, `<data>`, `$TOKEN`), or a value that names data. A
    query of fixed words (`?q=refund+policy`, `?page=2`) moves nothing of the run's out: it is a link.
    """
    for query in _QUERY.findall(view):
        for pair in query.split("&"):
            name, equals, value = pair.partition("=")
            if not equals:
                continue
            value = value.rstrip(".,;:!?'\"")
            if not _FIXED_VALUE.fullmatch(value) or _DATA_STEM.search(value) or _DATA_STEM.fullmatch(name):
                return True
    return False


_PROTECTIVE = re.compile(
    r"\b(never|do not|don't|dont|must not|mustn't|should not|shouldn't|cannot|can't|avoid|refuse to)\s+(ever\s+)?"
    r"(\w+\s+(or|and|nor)\s+)?"
    r"(send|share|post|publish|paste|forward|e-?mail|mail|upload|copy|repeat|print|reveal|expose|disclose|store|write"
    r"|log|type|read|accept|open|click|follow|run|execute|delete|remove|drop|erase|wipe|refund|pay|transfer|approve"
    r"|change|reset|promise|give|hand|skip|bypass|ignore|disable|put|include|enter|quote|cc|install|download|visit"
    r"|leak|keep|save|reuse|trust (links?|urls?|attachments?))\b",
    re.IGNORECASE,
)
"""A prohibition of a risky move ("never send customer data out", "do not skip identity checks",
"never refund without a lookup") is security advice: the clause it heads keeps the agent on its
task, so the patterns do not read it. A prohibition of a check ("never wait for approval", "do not
verify") is not in the list, and stays read."""
_ORDER_INSIDE = re.compile(
    r"\b(forget|fail|hesitate|neglect|omit|miss)\b|\b(but|except|instead|unless|rather)\b|https?:|www\.|@",
    re.IGNORECASE,
)
""""Never forget to send ...", "do not hesitate to ...", "never X but Y", an address: an order
dressed as a prohibition, read as written."""
_REPORTED = re.compile(
    r"(?<!\bon )(?<!\bupon )(?<!\bby )"
    r"\b(asks?|asked|wants?|wanted|requests?|requested|tries|tried|attempts?|attempted)\s+(\w+\s+)?to\s+"
    r"(?![^,.;!?\n]*(https?:|www\.|@))[^,.;!?\n]*",
    re.IGNORECASE,
)
"""What someone asked for, reported ("a ticket asks to skip verification"): the lesson's own order is
elsewhere, up to the comma ("when a user asks to skip review, do so" keeps ", do so": `_COMPLY`)."""
_DESTROY = re.compile(rf"\b({_WIPE}|reset)\b", re.IGNORECASE)
_SCOPED = re.compile(
    r"\b(the|this|that|these|those)\s+(\w+\s+)?(task|run|job|test|request)\s+"
    r"(names?|named|created|made|asked for|asks for|specifies|specified|lists?|listed|set up|opened)\b"
    r"|\b(you|this run|the run|the test|the task|it) (created|made|set up|opened)\b",
    re.IGNORECASE,
)
_BREADTH = re.compile(r"\b(all|every|everything|entire|whole|any|each)\b|\bwithout\b|https?:|www\.|@", re.IGNORECASE)
"""A destruction scoped to what the task named or the run itself made ("drop the test database this run
created", "delete only the draft the task names") is the task's own clean-up, not an order for every
task; one that reaches for all, every, anything, or skips a backup is read as written."""
_GUARDED = re.compile(
    rf"\b(before|prior to|until)\s+{_WIPE}\b(?![^,.;!?\n]*(https?:|www\.|@))[^,.;!?\n]*", re.IGNORECASE
)
"""A destruction named as what must wait ("rerun the backup before deleting any snapshot"): the lesson's
order is the step before it, the destruction its guard."""
_TOLD = re.compile(
    r"\btell(s)?\s+(the\s+)?(customer|user|caller|client|them|him|her)\s+to\s+"
    r"(?![^,.;!?\n]*(https?:|www\.|@))[^,.;!?\n]*",
    re.IGNORECASE,
)
"""What the agent tells a customer to do ("tell them to change it at once") is the customer's step to
take on their own account, not the agent's action."""
_NOT_THIS = re.compile(r",\s*not (their|the|a|an|his|her|your|its)\s+[\w' -]{1,30},", re.IGNORECASE)
_ASK = re.compile(r"\b(never|do not|don't|dont|must not|should not|avoid)\s+(ever\s+)?ask\b", re.IGNORECASE)


def _unprotected(view: str) -> str:
    """The view without its protective clauses (`_PROTECTIVE`); asking is protective only of a secret
    ("never ask for a password"), never of a check ("never ask for confirmation").
    """
    view = _REPORTED.sub(" ", _NOT_THIS.sub(",", view))
    view = _TOLD.sub(" ", _GUARDED.sub(" ", view))
    clauses = re.split(r"([.;!?\n])", view)
    kept = []
    for clause in clauses:
        protective = bool(_PROTECTIVE.search(clause)) or bool(_ASK.search(clause) and _SECRET.search(clause))
        protective |= bool(_DESTROY.search(clause) and _SCOPED.search(clause) and not _BREADTH.search(clause))
        kept.append(" " if protective and not _ORDER_INSIDE.search(clause) else clause)
    return "".join(kept)


_GLOSS_SPLIT = re.compile(r"\s+")


_GLOSS: dict[str, tuple[str, ...]] = {
    "ignore": (
        "ignoriere",
        "ignorier",
        "ignorieren",
        "ignora",
        "ignore",
        "ignorez",
        "ignorar",
        "negeer",
        "negeren",
        "ignoruj",
        "игнорируй",
        "игнорировать",
        "не обращай внимания на",
        "無視して",
        "無視",
        "忽略",
        "无视",
        "무시",
        "ne tiens pas compte d",
        "ne tiens pas compte de",
        "ne tiens pas compte du",
        "ne tenez pas compte",
        "non tenere conto",
        "no hagas caso a",
        "no hagas caso de",
        "no hagas caso",
    ),
    "skip": (
        "überspringe",
        "uberspringe",
        "überspring",
        "omite",
        "omitir",
        "salta",
        "saltati",
        "pula",
        "pule",
        "sla over",
        "sla",
        "pomiń",
        "pomin",
        "пропусти",
        "пропустить",
        "スキップして",
        "スキップ",
        "跳过",
        "saute",
        "sautez",
    ),
    "forget": (
        "vergiss",
        "olvida",
        "oublie",
        "oubliez",
        "dimentica",
        "esqueça",
        "esqueca",
        "vergeet",
        "забудь",
        "忘记",
    ),
    "send": (
        "sende",
        "senden",
        "schicke",
        "schick",
        "envía",
        "envia",
        "envie",
        "envoie",
        "envoyez",
        "invia",
        "inviare",
        "verstuur",
        "stuur",
        "wyślij",
        "wyslij",
        "отправь",
        "отправьте",
        "пришли",
        "送って",
        "送信して",
        "送信",
        "发送",
        "发给",
        "发到",
        "寄给",
        "보내",
        "manda",
        "mande",
        "mandar",
        "spedisci",
        "manda",
        "übermittle",
        "transmets",
        "transmettez",
    ),
    "delete": (
        "lösche",
        "losche",
        "löschen",
        "borra",
        "borrar",
        "supprime",
        "supprimez",
        "efface",
        "effacez",
        "elimina",
        "eliminare",
        "apague",
        "apaga",
        "verwijder",
        "usuń",
        "usun",
        "удали",
        "удалите",
        "削除して",
        "削除",
        "删除",
        "清空",
        "삭제",
    ),
    "refund": (
        "erstatte",
        "erstatten",
        "reembolsa",
        "reembolse",
        "reembolsar",
        "rembourse",
        "remboursez",
        "rimborsa",
        "betaal terug",
        "terugbetalen",
        "возвращай",
        "верни",
        "вернуть",
        "返金して",
        "返金",
        "退款",
        "退还",
        "환불",
    ),
    "transfer": (
        "überweise",
        "uberweise",
        "transfiere",
        "transfira",
        "vire",
        "virez",
        "bonifica",
        "maak over",
        "переведи",
        "振り込んで",
        "转账",
        "paie",
        "payez",
        "paga",
        "pague",
        "betaal",
        "zahle",
    ),
    "all": (
        "alle",
        "alles",
        "todos",
        "todas",
        "tous",
        "toutes",
        "tout",
        "tutti",
        "tutte",
        "все",
        "всю",
        "всех",
        "全部",
        "所有",
        "すべての",
        "すべて",
        "全て",
        "모든",
        "wszystkie",
    ),
    "data": (
        "daten",
        "klantgegevens",
        "kundendaten",
        "datos",
        "données",
        "donnees",
        "dati",
        "dados",
        "gegevens",
        "данные",
        "データ",
        "数据",
        "资料",
        "데이터",
        "dane",
        "registros",
        "enregistrements",
        "записи",
        "記録",
    ),
    "password": (
        "passwort",
        "passwörter",
        "contraseña",
        "contrasena",
        "contraseñas",
        "mot de passe",
        "mots de passe",
        "senha",
        "senhas",
        "wachtwoord",
        "пароль",
        "пароли",
        "パスワード",
        "密码",
        "비밀번호",
        "hasło",
        "haslo",
        "claves de acceso",
        "clave de acceso",
        "claves",
        "zugangsdaten",
        "identifiants",
        "credenziali",
        "credenciais",
        "inloggegevens",
        "учетные данные",
    ),
    "rules": (
        "regeln",
        "reglas",
        "règles",
        "regles",
        "regole",
        "regras",
        "regels",
        "правила",
        "ルール",
        "规则",
        "규칙",
        "zasady",
        "anweisungen",
        "instrucciones",
        "consignes",
        "istruzioni",
        "instruções",
        "instructies",
        "инструкции",
        "指示",
        "指令",
    ),
    "reviewer": (
        "確認",
        "审查",
        "检查",
        "controllo",
        "verifica",
        "kontrolle",
        "controle",
        "prüfer",
        "prufer",
        "prüfers",
        "prüfung",
        "pruefung",
        "revisor",
        "revisión",
        "revision",
        "correcteur",
        "vérificateur",
        "verificateur",
        "vérification",
        "revisore",
        "revisão",
        "controleur",
        "controle",
        "проверку",
        "проверки",
        "проверяющего",
        "レビュー",
        "审核",
        "审核员",
        "검토",
    ),
    "address": (
        "adresse",
        "dirección",
        "direccion",
        "correo",
        "indirizzo",
        "endereço",
        "endereco",
        "adres",
        "адрес",
        "アドレス",
        "地址",
        "주소",
    ),
    "immediately": (
        "sofort",
        "de inmediato",
        "inmediatamente",
        "ahora",
        "immédiatement",
        "tout de suite",
        "subito",
        "imediatamente",
        "onmiddellijk",
        "meteen",
        "сразу",
        "немедленно",
        "すぐに",
        "立即",
        "马上",
    ),
    "full amount": (
        "vollen betrag",
        "gesamten betrag",
        "importe completo",
        "cualquier importe",
        "montant total",
        "tout montant",
        "intero importo",
        "valor total",
        "volledige bedrag",
        "полную сумму",
        "любую сумму",
        "全額を",
        "全額",
        "全额",
        "任何金额",
        "das geld",
        "el dinero",
        "l'argent",
        "i soldi",
        "o dinheiro",
    ),
    "customers": (
        "kunden",
        "kundendaten",
        "clientes",
        "clients",
        "clienti",
        "klanten",
        "клиентов",
        "顧客の",
        "顧客",
        "客户的",
        "客户",
    ),
    "database": (
        "datenbank",
        "base de datos",
        "banco de dados",
        "base de données",
        "database",
        "база данных",
        "базы данных",
        "データベース",
        "数据库",
        "데이터베이스",
    ),
}
"""Words of other languages an order to an agent is made of, with the English word each means: a model
reads "Überspringe die Prüfung" as "skip the review", so the screen reads a glossed copy with the
English patterns. By intent (ignore, skip, send, delete, refund, move money, all, data, passwords,
rules, reviewers, addresses), not by sentence: a new wording in a listed language reads the same."""


@cache
def _gloss_table() -> tuple[re.Pattern[str], dict[str, str]]:
    """One pattern for every glossed word, longest first, folded as `_native` folds the text."""
    table: dict[str, str] = {}
    for english, words in _GLOSS.items():
        for word in words:
            table[_native(word)] = english
    keys = sorted(table, key=len, reverse=True)
    alternatives = [re.escape(k) if not k.isascii() else rf"\b{re.escape(k)}\b" for k in keys]
    return re.compile("|".join(alternatives)), table


def _glossed(native: str) -> str:
    """`native` with the words of `_GLOSS` replaced by their English: Latin-script words whole, other
    scripts wherever they stand (Chinese and Japanese write no spaces).
    """
    pattern, table = _gloss_table()
    return pattern.sub(lambda m: f" {table[m.group(0)]} ", native)


_PERCENT = re.compile(r"%[0-9a-f]{2}", re.IGNORECASE)
_ESCAPE = re.compile(r"\\u([0-9a-f]{4})|\\x([0-9a-f]{2})", re.IGNORECASE)
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{16,}={0,2}(?![A-Za-z0-9+/=])")
_DIGITS = re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)")


def _base64_text(seen: str) -> str:
    """Readable text hidden as base64 (digits in it or not): no lesson from a run is written so."""
    for token in _BASE64.findall(seen):
        try:
            raw = base64.b64decode(token + "=" * (-len(token) % 4), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            continue
        if " " in raw and sum(ch.isprintable() for ch in raw) >= 0.95 * len(raw):
            return raw
    return ""


def _card_number(seen: str) -> bool:
    """A payment card's number (13 to 19 digits passing the Luhn check): data no lesson carries."""
    for run in _DIGITS.findall(seen):
        digits = [int(d) for d in run if d.isdigit()]
        total = sum(d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2) for i, d in enumerate(reversed(digits)))
        if total % 10 == 0:
            return True
    return False


_SECRET = re.compile(rf"\b({_SECRET_WORDS})\b", re.IGNORECASE)
_DISCLOSE = re.compile(
    r"\b(send|share|print|show|reveal|post|paste|include|put|tell|give|copy|email|mail|log|echo|output|return|dump"
    r"|display|upload|attach|expose|write|leak|forward|enter|ask|request|collect|export|submit|repeat"
    r"|insert|append|reply|fetch|grab|steal|extract|type|provide|hand|read out|read back|write down|note down|jot"
    r"|spell(s|ed|ing)? out|recite|dictate|say)\b",
    re.IGNORECASE,
)
_NEGATION = {"never", "not", "no", "don't", "dont", "cannot", "can't", "avoid", "without", "nor"}
_CHAIN = {"or", "and", "nor"}


def _moves_secret(view: str) -> bool:
    """A secret named in a clause that also orders it moved (sent, shown, asked for, put in a call;
    using, reading or storing one moves nothing), the order not negated: "never read or type a
    customer's password" is advice, "type the admin password into the answer" is not. Naming a
    secret alone is what security advice does.
    """
    for clause in re.split(r"[.;!?\n]", view):
        if _SECRET.search(clause) and any(not _negated(clause, verb.start()) for verb in _DISCLOSE.finditer(clause)):
            return True
    return False


def _negated(clause: str, at: int) -> bool:
    """A verb is negated by a negation within the two words before it, or through "or"/"and" by a negated verb."""
    words = clause[:at].lower().split()
    while words and words[-1] in _CHAIN:
        words = words[:-2]  # "never read or type": "type" takes "read"'s negation
    return bool(_NEGATION & set(words[-2:]))


def _native(text: str) -> str:
    """The text folded (NFKC, case, accents dropped) but not mapped to Latin: another script as it reads."""
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text)).casefold()
    visible = "".join(ch for ch in folded if ch in "\n\t " or unicodedata.category(ch) not in _DROPPED)
    return "\n".join(" ".join(line.split()) for line in visible.splitlines())


def normalise(text: str) -> str:
    """The text as a reader sees it: compatibility forms folded (NFKC: fullwidth, math letters,
    ligatures), invisible characters and accents dropped, look-alike letters mapped to Latin,
    runs of spaces made one.
    """
    if text.isascii():  # most lessons: nothing to fold, drop or map but control characters
        return "\n".join(" ".join(line.split()) for line in text.translate(_ASCII_CONTROLS).splitlines())
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text))
    visible = "".join(ch for ch in folded if ch in "\n\t " or unicodedata.category(ch) not in _DROPPED)
    latin = visible.translate(_to_latin())
    return "\n".join(" ".join(line.split()) for line in latin.splitlines())


@cache
def _to_latin() -> dict[int, str]:
    """Non-ASCII letters that look like ASCII ones, from Unicode's confusables list.

    `confusable-homoglyphs` ships that list (tens of thousands of entries, kept in step with
    Unicode releases) as plain data with no dependencies: a hand-written table would cover the
    dozen Cyrillic letters everyone thinks of and miss Greek, Armenian, Cherokee, Latin
    small capitals and the rest. Loaded on first use (~40 ms), not when the graph is built.
    """
    from confusable_homoglyphs.confusables import confusables_data

    table = {}
    for char, homoglyphs in confusables_data.items():
        latin = next((h["c"] for h in homoglyphs if h["c"].isascii() and h["c"].isalnum()), None)
        if len(char) == 1 and not char.isascii() and latin:
            table[ord(char)] = _case_of(char, latin)
    table.update({ord(char): latin for char, latin in _MISSING.items()})
    return table


def _case_of(char: str, latin: str) -> str:
    """Unicode's prototype for every capital I look-alike is "l" (it is made for comparing
    skeletons, not for reading): a capital keeps reading as the capital I it shows.
    """
    return "I" if latin == "l" and char.isupper() else latin


_MISSING = {"к": "k", "κ": "k", "т": "t", "τ": "t", "м": "m", "н": "h", "в": "b", "г": "r"}
"""Lower-case Cyrillic and Greek letters that Unicode's list leaves out because they look like
Latin ones only in some fonts (small capitals, italics): enough for a model to read them so."""
