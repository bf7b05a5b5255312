"""Paraphrase templates of user turns, split into disjoint train and held-out test sets.

Every intent of `plans` has at least three paraphrases; the third of each list (and every third
after it) is held out for the `test` split, the rest are `train`'s, so test tasks phrase requests
in ways training never showed. Slots (`{file}`, `{person}`...) are filled with the values the
calls need, so every turn is solvable from its text. `VAGUE` holds, for intents whose `missing`
slot a miss_param turn can leave out, paraphrases without that slot and the slot's label for the
follow-up turn that supplies it (`SUPPLY`). Connectors join the sentences of a multi-action turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

TEMPLATES: dict[str, tuple[str, ...]] = {
    # GorillaFileSystem
    "fs.cd": ("go into the {folder} folder.", "open the directory {folder}.",
              "switch to the {folder} directory.", "navigate into {folder}."),
    "fs.cd_up": ("go back up to the parent folder.", "move one directory up.",
                 "return to the parent directory.", "step out of this folder."),
    "fs.ls": ("list what is in the current folder.", "show me the files here.",
              "what does this directory contain?", "display the contents of this folder."),
    "fs.mkdir": ("create a folder called {folder}.", "make a new directory named {folder}.",
                 "set up a directory {folder} here.", "add a folder named {folder}."),
    "fs.touch": ("create an empty file named {file}.", "make a new file {file}.",
                 "touch a file called {file} here.", "add a blank file {file}."),
    "fs.write_new": ("create a file {file} and write {content} into it.",
                     "make a new file {file} containing {content}.",
                     "start a file called {file} with the text {content}.",
                     "add a file {file} and put {content} in it."),
    "fs.echo": ("write {content} into {file}.", "replace the contents of {file} with {content}.",
                "put the text {content} in the file {file}.", "overwrite {file} with {content}."),
    "fs.cat": ("show me what {file} says.", "display the contents of {file}.",
               "print out the file {file}.", "read {file} for me."),
    "fs.sort": ("sort the lines of {file}.", "give me {file} sorted alphabetically.",
                "order the contents of {file}.", "alphabetize the lines in {file}."),
    "fs.rm": ("delete the file {file}.", "remove {file} from this folder.",
              "get rid of {file}.", "erase the file {file}."),
    "fs.mv_into": ("move {file} into the {folder} folder.", "put {file} in {folder}.",
                   "transfer {file} to the directory {folder}.", "relocate {file} into {folder}."),
    "fs.cp_into": ("copy {file} into the {folder} folder.", "put a copy of {file} in {folder}.",
                   "duplicate {file} into the directory {folder}.",
                   "make a copy of {file} inside {folder}."),
    "fs.mv_as": ("rename {file} to {new_name}.", "change the name of {file} to {new_name}.",
                 "call the file {file} {new_name} from now on.", "rename the file {file} as {new_name}."),
    "fs.cp_as": ("copy {file} to a new file {new_name}.", "duplicate {file} as {new_name}.",
                 "make a copy of {file} named {new_name}.", "clone {file} into {new_name}."),
    "fs.grep": ("find the lines of {file} that contain {pattern}.",
                "search {file} for {pattern}.", "grep {file} for the word {pattern}.",
                "which lines in {file} mention {pattern}?"),
    "fs.wc": ("count the {unit} in {file}.", "how many {unit} does {file} have?",
              "tell me the number of {unit} in {file}.", "give me the {unit} count of {file}."),
    "fs.tail": ("show the last {lines} lines of {file}.", "print the final {lines} lines of {file}.",
                "what are the last {lines} lines in {file}?", "display the tail of {file}, {lines} lines."),
    "fs.diff": ("compare {file} with {other}.", "show the differences between {file} and {other}.",
                "diff {file} against {other}.", "how does {file} differ from {other}?"),
    "fs.find": ("find every file whose name contains {name}.", "search for files named like {name}.",
                "locate anything with {name} in its name.", "look for files matching {name}."),
    # MathAPI
    "math.add": ("add {a} and {b}.", "what is {a} plus {b}?", "compute the sum of {a} and {b}.",
                 "add {b} to {a}."),
    "math.subtract": ("subtract {b} from {a}.", "what is {a} minus {b}?",
                      "compute {a} take away {b}.", "take {b} away from {a}."),
    "math.multiply": ("multiply {a} by {b}.", "what is {a} times {b}?",
                      "compute the product of {a} and {b}.", "work out {a} multiplied by {b}."),
    "math.divide": ("divide {a} by {b}.", "what is {a} divided by {b}?",
                    "compute {a} over {b}.", "split {a} into {b} equal parts, how big is each?"),
    "math.chain_add": ("add {b} to that result.", "increase the result by {b}.",
                       "take the last result plus {b}.", "add {b} to the previous answer."),
    "math.chain_subtract": ("subtract {b} from that result.", "reduce the result by {b}.",
                            "take {b} off the last result.", "subtract {b} from the previous answer."),
    "math.chain_multiply": ("multiply that result by {b}.", "scale the result by {b}.",
                            "take the last result times {b}.", "multiply the previous answer by {b}."),
    "math.chain_divide": ("divide that result by {b}.", "split the result by {b}.",
                          "take the last result over {b}.", "divide the previous answer by {b}."),
    "math.mean": ("compute the average of {numbers}.", "what is the mean of {numbers}?",
                  "find the arithmetic mean of {numbers}.", "average out {numbers}."),
    "math.sum_values": ("sum up {numbers}.", "what do {numbers} add up to?",
                        "give me the total of {numbers}.", "add together {numbers}."),
    "math.max_value": ("which is the largest of {numbers}?", "find the maximum of {numbers}.",
                       "pick the biggest number among {numbers}.", "what is the max of {numbers}?"),
    "math.min_value": ("which is the smallest of {numbers}?", "find the minimum of {numbers}.",
                       "pick the lowest number among {numbers}.", "what is the min of {numbers}?"),
    "math.standard_deviation": ("compute the standard deviation of {numbers}.",
                                "how spread out are {numbers}? give the standard deviation.",
                                "find the std dev of {numbers}.",
                                "what is the standard deviation of {numbers}?"),
    "math.power": ("raise {a} to the power {b}.", "what is {a} to the power of {b}?",
                   "compute {a} raised to {b}.", "calculate {a}^{b}."),
    "math.percentage": ("what percentage of {b} is {a}?", "express {a} as a percentage of {b}.",
                        "how many percent of {b} is {a}?", "compute {a} out of {b} in percent."),
    "math.round_number": ("round {a} to {b} decimal places.", "give me {a} rounded to {b} decimals.",
                          "round off {a} keeping {b} decimal places.", "shorten {a} to {b} decimal places."),
    "math.square_root": ("compute the square root of {a} with precision {b}.",
                         "what is the square root of {a}? use precision {b}.",
                         "find sqrt of {a} to precision {b}.",
                         "take the square root of {a}, precision {b}."),
    # MessageAPI
    "msg.login": ("log me in to the messaging app as user {user_id}.",
                  "sign in to messages with my user id {user_id}.",
                  "my messaging user id is {user_id}, please log me in.",
                  "log into the message service using id {user_id}."),
    "msg.send": ("send {person} the message {message}.", "message {person}: {message}.",
                 "text {person} saying {message}.", "drop {person} a note: {message}."),
    "msg.add_and_send": ("add {person} as a contact and send them {message}.",
                         "put {person} in my contacts, then message them {message}.",
                         "register {person} as a new contact and text them {message}.",
                         "create a contact for {person} and send {message} to them."),
    "msg.add_contact": ("add {person} to my contacts.", "create a new contact named {person}.",
                        "register {person} as a contact.", "save {person} as a contact."),
    "msg.delete": ("delete the latest message I sent to {person}.",
                   "remove my most recent message to {person}.",
                   "take back the last message sent to {person}.",
                   "erase my newest message to {person}."),
    "msg.search": ("search my messages for {keyword}.", "find messages that mention {keyword}.",
                   "look through the messages for the word {keyword}.",
                   "which messages contain {keyword}?"),
    "msg.view": ("show me all the messages I have sent.", "list my sent messages.",
                 "display every message I sent.", "what messages have I sent so far?"),
    "msg.stats": ("give me my messaging statistics.", "show the stats of my messages.",
                  "how many messages and contacts do I have?", "report my message statistics."),
    "msg.list_users": ("list all users in the workspace.", "who is in the workspace?",
                       "show me every user of the messaging workspace.",
                       "give me the list of workspace users."),
    # TicketAPI
    "ticket.login": ("log me in to the ticket system as {username} with password {password}.",
                     "sign in to tickets, username {username}, password {password}.",
                     "my ticket credentials are {username} / {password}, log me in.",
                     "authenticate me for support tickets: user {username}, password {password}."),
    "ticket.create": ("open a ticket titled {title}, described as {description}, priority {priority}.",
                      "create a support ticket {title} with description {description} and "
                      "priority {priority}.",
                      "file a priority {priority} ticket called {title}: {description}.",
                      "raise a ticket named {title} at priority {priority}, details {description}."),
    "ticket.get": ("show me the details of {ref}.", "pull up {ref}.", "what is the status of {ref}?",
                   "fetch {ref} for me."),
    "ticket.close": ("close {ref}.", "mark {ref} as closed.", "shut {ref}, it is no longer needed.",
                     "please close out {ref}."),
    "ticket.resolve": ("resolve {ref} with the note {resolution}.",
                       "mark {ref} resolved: {resolution}.",
                       "record {resolution} as the resolution of {ref}.",
                       "settle {ref}, resolution {resolution}."),
    "ticket.priority": ("set the priority of {ref} to {priority}.", "change {ref} to priority {priority}.",
                        "make {ref} a priority {priority} ticket.", "update {ref}'s priority to {priority}."),
    "ticket.list": ("list my {status} tickets.", "show me the tickets of mine that are {status}.",
                    "which of my tickets are {status}?", "give me all my {status} tickets."),
}

# intent -> (label of the missing slot, paraphrases without it)
VAGUE: dict[str, tuple[str, tuple[str, ...]]] = {
    "fs.mkdir": ("folder name", ("create a new folder here.", "make a directory for me.",
                                 "set up a new directory.")),
    "fs.touch": ("file name", ("create a new empty file.", "make me a blank file here.",
                               "touch a new file.")),
    "fs.write_new": ("text", ("create a file {file} and write something into it.",
                              "make a new file {file} with some text in it.",
                              "start a file called {file} with a line of text.")),
    "fs.echo": ("text", ("write something into {file}.", "replace the contents of {file}.",
                         "overwrite {file} with new text.")),
    "fs.mv_into": ("destination folder", ("move {file} into another folder.",
                                          "put {file} somewhere else.",
                                          "transfer {file} to a different directory.")),
    "fs.cp_into": ("destination folder", ("copy {file} into another folder.",
                                          "put a copy of {file} in some folder.",
                                          "duplicate {file} into a directory.")),
    "fs.mv_as": ("new name", ("rename {file}.", "give {file} a new name.",
                              "change what {file} is called.")),
    "fs.cp_as": ("new file name", ("copy {file} to a new file.", "duplicate {file}.",
                                   "make a copy of {file} under another name.")),
    "fs.grep": ("search word", ("search {file} for a word.", "find some lines in {file}.",
                                "grep {file} for a term.")),
    "fs.tail": ("number of lines", ("show the last few lines of {file}.",
                                    "print the end of {file}.", "display the tail of {file}.")),
    "fs.diff": ("other file", ("compare {file} with another file.",
                               "show how {file} differs from another file.",
                               "diff {file} against a second file.")),
    "fs.find": ("name to look for", ("find some files for me.", "search for a file by name.",
                                     "locate a file in here.")),
    "math.add": ("second number", ("add {a} and another number.", "what is {a} plus something?",
                                   "compute the sum of {a} and a second number.")),
    "math.subtract": ("number to subtract", ("subtract a number from {a}.",
                                             "what is {a} minus something?",
                                             "take some amount away from {a}.")),
    "math.multiply": ("multiplier", ("multiply {a} by some number.", "what is {a} times something?",
                                     "compute the product of {a} and another number.")),
    "math.divide": ("divisor", ("divide {a} by some number.", "what is {a} divided by something?",
                                "split {a} into equal parts.")),
    "math.chain_add": ("number to add", ("add something to that result.", "increase the result.",
                                         "add a bit more to the previous answer.")),
    "math.chain_subtract": ("number to subtract", ("subtract something from that result.",
                                                   "reduce the result.",
                                                   "take some off the previous answer.")),
    "math.chain_multiply": ("multiplier", ("multiply that result by something.", "scale the result.",
                                           "multiply the previous answer.")),
    "math.chain_divide": ("divisor", ("divide that result by something.", "split the result.",
                                      "divide the previous answer.")),
    "math.mean": ("numbers", ("compute the average of my numbers.", "what is the mean of my data?",
                              "find the arithmetic mean of a few values.")),
    "math.sum_values": ("numbers", ("sum up my numbers.", "what do my values add up to?",
                                    "give me the total of some numbers.")),
    "math.max_value": ("numbers", ("which of my numbers is the largest?", "find the maximum of my list.",
                                   "pick the biggest of a few numbers.")),
    "math.min_value": ("numbers", ("which of my numbers is the smallest?", "find the minimum of my list.",
                                   "pick the lowest of a few numbers.")),
    "math.standard_deviation": ("numbers", ("compute the standard deviation of my data.",
                                            "how spread out are my numbers?",
                                            "find the std dev of some values.")),
    "msg.send": ("message text", ("send {person} a message.", "message {person} for me.",
                                  "text {person} something.")),
    "msg.add_and_send": ("message text", ("add {person} as a contact and send them a message.",
                                          "put {person} in my contacts, then message them.",
                                          "register {person} as a contact and text them.")),
    "msg.search": ("keyword", ("search my messages for a word.", "find some messages for me.",
                               "look through my messages for a term.")),
    "ticket.create": ("ticket title", ("open a ticket described as {description}, priority {priority}.",
                                       "create a priority {priority} support ticket: {description}.",
                                       "file a ticket with description {description} at "
                                       "priority {priority}.")),
    "ticket.resolve": ("resolution", ("resolve {ref}.", "mark {ref} as resolved.", "settle {ref}.")),
    "ticket.priority": ("new priority", ("change the priority of {ref}.", "reprioritise {ref}.",
                                         "update how urgent {ref} is.")),
}

SUPPLY: tuple[str, ...] = ("the {label} is {value}.", "sorry, I forgot: the {label} should be {value}.",
                           "use {value} as the {label}.", "oh, and the {label}: {value}.",
                           "for the {label}, take {value}.", "let me add the {label}: {value}.")

CONNECTORS: tuple[str, ...] = ("then", "after that,", "once that's done,", "next,", "also,",
                               "and afterwards", "following that,", "and then", "after this,")


def for_split(items: Sequence[str], split: str) -> tuple[str, ...]:
    """The paraphrases of `split`: every third item (from the third) is test's, the rest train's."""
    held_out = split == "test"
    return tuple(item for i, item in enumerate(items) if (i % 3 == 2) == held_out)


def sentence(text: str) -> str:
    """`text` with its first letter upper-cased."""
    return text[:1].upper() + text[1:]


def render_turn(parts: Sequence[tuple[str, Mapping[str, str]]], connectors: Sequence[str],
                pick) -> str:
    """One user message: each (template, slots) filled in, joined with connectors drawn by
    `pick` (a `random.Random.choice`)."""
    sentences = []
    for i, (template, slots) in enumerate(parts):
        text = template.format(**slots)
        sentences.append(sentence(text) if i == 0 else sentence(f"{pick(connectors)} {text}"))
    return " ".join(sentences)
