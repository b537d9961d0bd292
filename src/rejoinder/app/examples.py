"""The reference support agent's labelled caller utterances: each tool's ``examples`` and the
agent's talk examples (:mod:`rejoinder.app.support`).

They are the tool decision's data: the first few of each tool and of talk are the tool gate's
few-shot prompt (:data:`rejoinder.adapters._gate.TOOL_SHOTS`), every one of them is an example
of the nearest-example matcher (:mod:`rejoinder.adapters._which`), and together they are the
*calibration set* ``rejoinder calibrate`` fits the gate's threshold on (leave-one-out).

Provenance: the first three or four of each group were written for rejoinder in its first
sessions. The rest (14 a tool, 30 of talk) were written on 2026-12-06 by a writer who was given
the tools' descriptions and the business alone and read no scenario, run, transcript or
benchmark item, so that they cover wordings nobody tuned on. ``tests/harness`` checks that every
scenario line of every suite stays at least 0.3 WER from all of them.
"""

from __future__ import annotations

#: ``lookup_order``: an order's status, with its number or without
ORDER_EXAMPLES = (
    'Could you find order 8812 for me?',
    'Order number 3 3 0 9.',
    'Is my package 1456 on its way?',
    "I'm checking on an order I placed, 2604.",
    # written blind (2026-12-06)
    "Hi, um, where's my order 5, 3, 1, 8?",
    'Has order seven two four one shipped yet?',
    "I ordered a lamp a couple weeks back and it still hasn't turned up. The number's 6093.",
    "When's my blender gonna arrive? It's order 4 7 7 2.",
    "Yeah, so I'm calling about the shoes I bought, order number nine zero one five.",
    'Can you tell me the status of 2387?',
    "My daughter said her backpack should've come by now, could you check order 1, 6, 4, 9?",
    "I was wondering whether the phone case I ordered has been sent out yet, I've got the number here somewhere.",
    'Tracking on 8 0 5 6, please.',
    "Um, I placed an order, the number is, uh, three eight two zero, and I just wanna know when it's due.",
    'Any news on my kettle? Order 5704.',
    'Has the rug from order 7, 1, 3, 2 left the warehouse?',
    'Order four four six one, is it out for delivery?',
    "So the toaster I got from you guys, what's the delivery date on that? It's 9 2 6 8.",
)

#: ``list_appointments``: what is booked, and when
LIST_EXAMPLES = (
    'Am I booked in this week?',
    'What time is my visit?',
    'Which bookings have I got with you?',
    'Remind me of my appointment, please.',
    # written blind (2026-12-06)
    "When's my haircut again?",
    'Um, do I have anything booked with you next week?',
    "Could you tell me what appointments I've got coming up?",
    'I forgot what day my consultation is.',
    "Yeah, hi, just double checking I'm down for Thursday.",
    "What's on the calendar for me?",
    "My wife thinks I've got a haircut tomorrow, is that right?",
    'I was wondering if you could read me back my bookings.',
    'Have I got a consultation scheduled or not?',
    'So what time did I book for?',
    'Is my appointment still on?',
    "Can you check whether I'm scheduled for anything on Monday?",
    'I wrote down the time somewhere and lost it, when am I coming in?',
    'Appointments. What have I got?',
)

#: ``reschedule_appointment``: a move, with a new day or time or without
MOVE_EXAMPLES = (
    'Push my appointment to Tuesday at noon.',
    'Can we do Monday morning instead?',
    'Could you shift my booking to Friday at two?',
    # written blind (2026-12-06)
    'Could I move my haircut to Wednesday at half past two?',
    'Something came up, I need to change my consultation.',
    'Um, can we push the haircut back to 4 PM?',
    "I'd like to bring my consultation forward to Tuesday, like ten in the morning if you have it.",
    'Is it possible to rearrange my appointment for next Thursday?',
    "Yeah, so Friday doesn't work anymore, any chance of Wednesday at 11 for the haircut?",
    'I need to reschedule.',
    'My boss just put a meeting on top of my consultation, can I switch it to 3 PM on Thursday?',
    "Could the haircut be a bit later in the day, say five o'clock?",
    'Swap my consultation to tomorrow afternoon, please.',
    'I was wondering whether I could change the day of my haircut.',
    'Can you slide my consultation to 9 AM Monday?',
    'Different time for my haircut, please, maybe 1:30 next Tuesday.',
    "Uh, I booked a consultation but I'd rather come in the week after, same time if that's doable.",
)

#: ``cancel_appointment``: a cancellation, naming the service or not
CANCEL_EXAMPLES = (
    "I won't make it, please call it off.",
    'Drop my booking.',
    'Take my appointment off the schedule.',
    # written blind (2026-12-06)
    'I need to cancel my haircut.',
    "Please cancel the consultation, I don't need it anymore.",
    "Um, I won't be coming in on Thursday, so can you cancel that?",
    'Yeah, scrap my appointment.',
    "I've decided against the consultation, can you get rid of it?",
    "I've got to look after my sick son, so I'll have to cancel my haircut.",
    'Cancel.',
    "I'd like to cancel my booking with you.",
    "I was wondering if I could just cancel rather than move it, I'm going away for a while.",
    "Forget the haircut, I'm not coming.",
    "So, I won't need that consultation after all. Please remove it.",
    'Can you take me off the list for the haircut on Monday?',
    "Something's come up and I'd rather just cancel my appointment altogether.",
    'Yeah, you can delete the consultation booking.',
)

#: ``cancel_appointment`` is offered only for words that can ask for a cancellation
#: (:attr:`rejoinder.tools.Tool.cue`): a cancel verb ("cancel", "call it off", "scrap", "drop",
#: "get rid of", "take me off"), or not coming ("won't make it", "can't come", "no longer need").
#: Why: on words with none of them, SmolLM2-135M's gate and nearest example still picked it now
#: and then; six of the 180 calls of three read suites (run ``20261206-131511-1cf1``) called it,
#: with no service, on small talk, thanks heard as "Smashing, at suit, …" and a request to renew
#: car insurance. Written from the examples above and general English (2026-12-06), then widened
#: twice with the idioms two sets of cancellations written blind showed missing ("knock it on
#: the head", "pull the pin", "void", and the recogniser's "council my appointment"); its recall
#: on each set before it was widened is in the README. English: an agent in another language needs its
#: own (or none).
CANCEL_CUE = (r"\b(?:cancel\w*|council|can sell|call\w* (?:\w+ ){0,4}off|scrap\w*|scratch|nix|kill|axe|void|bail"
              r"|pull(?:ing)? (?:out|the pin)|back(?:ing)? out|(?:need|want) (?:it|that|this|them) gone|line through"
              r"|(?:let|give) (?:\w+ ){0,2}(?:slot|spot|place) (?:go|away|to)"
              r"|withdraw\w*|drop(?:ping)? (?:it|that|this|the|my|out)|delete|remov\w*|get rid|free up"
              r"|(?:take|knock|strike|cross)\w* (?:\w+ ){0,3}off|on the head|off the (?:schedule|list|books|diary|calendar)"
              r"|out of the (?:diary|calendar|schedule|book)|unbook|clear (?:it|that|my|the)|forget (?:it|the|about|my)"
              r"|skip (?:it|the|my)|won'?t (?:make (?:it|the|my)|need|be (?:coming|able|there|needing|making|in|around))"
              r"|will not (?:make it|need|be)|(?:not|never) (?:going to |gonna )?(?:coming|come|make|making|need|needed)"
              r"|no longer|can'?t (?:make it|come|attend|go|be there|do it)|cannot (?:make it|come|attend|be there)"
              r"|unable to (?:make it|come|attend)|don'?t (?:need|want) (?:it|that|the|my|this)|(?:rather|better) not"
              r"|count me out|not (?:be )?(?:able|possible))\b")

#: ``list_appointments`` is offered only for words about the caller's own bookings that ask
#: something: a person ("I", "my", "me", "we", "my son's", "her") or a question of when
#: ("when's", "what time is") together with a question or a request (a clause opening with "when",
#: "what", "do", "have", "can", "is"…, a question mark, or "check", "tell me", "remind",
#: "forgot", "not sure", "wondering"…), or a bare "appointments" / "my booking". Why: questions
#: about booking in general ("do you charge if you miss an appointment", "what's the latest
#: appointment you do in the evening?") lay nearest its examples and were answered with the
#: caller's own list, a tool call on a turn that wanted none: 4 of the 8 such calls of the blind
#: decision set, 2 of the 5 of the second set. And remarks that ask nothing ("the girl who did my
#: haircut last month was brilliant", "my mum used to get her hair set at your place on
#: Fridays") did too: 4 of the 90 small-talk lines of a third set written blind on 2026-12-07
#: (``bench/data/decisions_blind3.tsv``). Withheld, it is set aside and the next tool chooses,
#: as for a move (:meth:`rejoinder.adapters._decide.DecideStep._uncued`). The person words were
#: written on 2026-12-07 from general English and checked, not widened; the question or request
#: on 2026-12-07 after reading that third set's misses. Recall on listing requests, both: 18 of
#: 18 examples above, 32 of 32 of the second set, 67 of 67 of the blind decision set, 12 of 12 of
#: the third, 12 of 12 listing turns of the read suites; the sealed and vault suites were not
#: read. Small-talk lines it offers the tool for: the third set 56 → 23 of 90, the read suites'
#: small-talk turns 21 → 9 of 36. Through the gate (``bench/tool_choice.py --designs gate
#: --items …``) the person words alone moved no call on small talk 87.1 → 93.5 % of the blind
#: set's 62 and 81.5 → 88.9 % of the second set's 27, right tool unchanged on both.
_LIST_WHO = (r"\b(?:i|i'?m|i'?ve|i'?d|i'?ll|me|my|mine|myself|we|we'?re|we'?ve|our|us"
             r"|he|she|his|her|him|they|their|them|son|daughter|wife|husband|kids?|mum|dad"
             r"|when'?s|when is|when are|when was|what time'?s|what time is|what day is)\b")
_LIST_ASK = (r"(?:^|[,.;!?]\s+)\W*(?:(?:um+|uh+|erm|so|yeah|yes|right|ok(?:ay)?|oh|hi|hiya|hey|hello"
             r"|and|but|well|sorry|now|also|actually|quick one|just|there|good (?:morning|afternoon"
             r"|evening)|excuse me|please|listen|look)\W+)*(?:when|what|which|where|how|is|am|are"
             r"|do|did|does|have|has|had|can|could|will|was|were|should|shall|any\w*)\b|\?"
             r"|\b(?:check\w*|confirm\w*|tell me|remind\w*|let me know|look\w* (?:up|at|into)|read"
             r"|find out|remember|forg[oe]t\w*|not sure|unsure|wonder(?:ing|ed)?|lost track|(?:need|want|wanna"
             r"|like) to know|double.?check\w*|show me|list|what|when)\b")
#: questions of what to do, asked of any customer with "I" ("do I need to book?", "how early
#: should I get there?"): no listing
_LIST_NOT = r"\b(?:(?:do|would|will) (?:i|we) (?:need|have) to|how (?:early|far|soon) )"
LIST_CUE = (rf"^(?![\s\S]*?{_LIST_NOT})(?=[\s\S]*?(?:{_LIST_ASK}))[\s\S]*?{_LIST_WHO}"
            r"|^\W*(?:\w+\W+)?(?:appointments?|bookings?|a ?pointments?)\W*$")

#: ``reschedule_appointment`` is offered only for words that can ask for a move: a move verb
#: ("move", "change", "push", "bring forward", "swap", "rebook"), a wish for another slot
#: ("instead", "later", "another day", "any chance of"), or a new day or time said after "to",
#: "for", "at", "say" or "how about". Why: its examples lay nearest to questions about a
#: booking that asked for no move ("when's my consultation again?", "I won't make it to my
#: consultation, could you take it off the books?"), and the agent asked for a new day and time
#: (every call of four read-suite scenarios, run ``20261207-001617-eb14``). Withheld, it is set
#: aside and the next tool chooses (:meth:`rejoinder.adapters._decide.DecideStep._uncued`).
#: Written on 2026-12-07 from the examples above and general English, widened once for the
#: recogniser's "re-shed yule". Recall on move requests: 17 of 17 examples above, 27 of 27 of
#: the second set (``bench/data/examples_second_set.tsv``), 15 of 15 of the blind decision set,
#: 14 of 14 move turns of the read suites; the sealed and vault suites were not read. A false
#: match only offers the tool as before.
_DAY = r"(?:mon|tues?|wed(?:nes)?|thu(?:rs)?|fri|sat(?:ur)?|sun)(?:day)?s?"
_WHEN = (rf"(?:{_DAY}|tomorrow|today|tonight|next|this|the (?:following|next|week|day|morning|afternoon"
         r"|evening)|morning|afternoon|evening|noon|midday|lunch\w*|half|quarter|\d|one|two|three|four|five"
         r"|six|seven|eight|nine|ten|eleven|twelve|early|late)")
MOVE_CUE = (r"\b(?:mov(?:e|ed|ing)|re-?sched\w*|re-?shed\w*|re-?arrang\w*|re-?book\w*|re-?set|chang\w*"
            r"|switch\w*|swap\w*|shift\w*|slid\w*|push\w*|bump\w*|bring\w*|brought"
            r"|pull\w* (?:it|that|this|my|the)|put (?:it|me|that|this|my|the)|postpon\w*|delay\w*"
            r"|later|earlier|sooner|forward|instead|rather|prefer\w*|different|another"
            r"|other (?:day|time|slot)|new (?:day|time|slot|date)"
            rf"|(?:to|till|until|at|say|do|try|make it|how about|what about) {_WHEN}"
            r"|(?:any|a) (?:chance|slot|space|opening|gap)|availab\w*|free|open(?:ing)?s?"
            r"|(?:does|did)n'?t (?:work|suit)"
            r"|(?:won'?t|will not|not going to|isn'?t going to) (?:work|suit))\b")

#: ``transfer_to_human``: the generic ones of :mod:`rejoinder.calltools`, then this business's
TRANSFER_EXAMPLES = (
    'Can I talk to a real person?',
    'I want to speak to a human, please.',
    'Put me through to someone who works there.',
    # written blind (2026-12-06)
    'Can I speak to a manager?',
    'Um, is there someone in the salon I could actually talk to?',
    "I'd rather deal with a person, honestly.",
    'Transfer me to a staff member please.',
    'Operator.',
    'Get me a human being.',
    "Yeah, I don't want a robot, put me on with somebody real.",
    'Could you connect me to the customer service team?',
    'My husband said I could ask for a real agent, can you do that?',
    'Is there a live person available?',
    'I need to talk with someone in charge about a complaint.',
    'Representative, please.',
    'Can you pass me over to one of your employees?',
    'I was hoping to chat with whoever runs the shop.',
)

#: ``end_call``: the generic ones of :mod:`rejoinder.calltools`, then this business's
END_EXAMPLES = (
    "That's all I needed, bye.",
    'No, nothing else. Goodbye!',
    'Okay, thanks, bye bye.',
    # written blind (2026-12-06)
    "Great, that's everything, bye.",
    "No, that's it for today. Take care.",
    "Alright, I'm done, cheers.",
    'Nope, that covers it. Goodbye.',
    'Bye now.',
    "Okay, I've got what I needed, have a good one.",
    'Lovely, thank you so much, bye for now.',
    'Nothing more from me, see ya.',
    "Um, no, I think I'm all set. Bye.",
    "I'll let you go now, thanks.",
    'Perfect. Talk to you later, bye.',
    'No other questions. Have a nice day.',
    "Yeah, that's it, I'm hanging up now.",
    'Cheers, goodbye.',
)

#: No tool, beside the gate's built-in small talk: questions about the shop, errands no tool
#: does (the agent says what it can help with), greetings, thanks and acknowledgements
TALK_EXAMPLES = (
    'Where is your shop?',
    'Is anybody there?',
    'What can you do for me?',
    'Could you order me a pizza?',
    'Can you get me a flight to Denver?',
    'Please reset the password of my email.',
    # written blind (2026-12-06)
    'Hello?',
    "Hi, it's Margaret here.",
    'Hey, how are you doing?',
    "Thank you, that's really helpful.",
    'Yes.',
    'Hmm, okay.',
    'Right, got it.',
    'Um, let me think.',
    'Uh, sorry, what was that?',
    'Oh, great, thanks.',
    'Sure.',
    "Wait, just a moment, my dog's barking.",
    'Nice, I appreciate it.',
    'Uh-huh.',
    "Lovely weather today, isn't it?",
    'What time do you open on Saturday?',
    'Do you guys sell desk lamps, or just the floor ones?',
    'How much is shipping usually?',
    'How much does a haircut cost?',
    'Is there parking near the salon?',
    'Do you take American Express?',
    'Are you open on public holidays?',
    "What's the nearest bus stop to you?",
    'Can you call me a taxi to the salon?',
    "What's the weather going to be like tomorrow?",
    'Could you help me file a claim on my car insurance?',
    'My sink is leaking, do you know a good plumber?',
    'Do you ship to Canada?',
    'Can you book me a table at an Italian restaurant tonight?',
    "Um, what's your returns policy, in general?",
)
