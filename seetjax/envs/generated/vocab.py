"""Entity vocabularies of generated tasks, split into disjoint train and test parts.

The held-out `test` split must test compositional generalisation, not memorisation: every entity a
task names (people, file and folder names, file lines, ticket titles, message texts...) comes from
a list whose items are assigned to `train` or `test` by a stable hash of the item, so no entity of
a test task ever appears in a train task. Numbers (math arguments, priorities) are not entities and
are shared, and so are the enumerations BFCL's tools fix (travel classes, currencies, sectors, car
doors). The lists are our own, written for this generator, except the closed sets BFCL's tools
know by name (`city`, `company`): those are split too, the cities by hand (`_TEST_MEMBERS`).
"""

from __future__ import annotations

import functools
import hashlib

from seetjax.errors import invalid

SPLITS = ("train", "test")
# About 30% of every list goes to test.
_TEST_PERCENT = 30

_WORDS = {
    "person": """
        Alice Bob Carmen Dmitri Elena Farid Greta Hiroshi Ingrid Jamal Keiko Lars Mei Nadia Oscar
        Priya Quentin Rosa Samir Tamsin Ulrich Vera Wen Ximena Yusuf Zara Amara Bruno Chiara Dev
        Esme Felix Gianna Hugo Isla Joaquin Kiran Lucia Mateo Noor Olga Pavel Rania Stellan Tobias
        Uma Viktor Wanda Yara Zoltan Anouk Bastian Cyra Dario Elif Fenna Gustav Hana Ivo
    """,
    "stem": """
        report summary notes budget agenda draft invoice roster schedule minutes inventory ledger
        proposal checklist outline memo journal forecast survey backlog changelog manifest catalog
        timeline analysis estimate contract receipt roadmap glossary index digest transcript
        feedback itinerary playlist recipe diary sketch quotes metrics results config readme
        snapshot census payroll archive tally briefing appendix abstract errata
    """,
    "folder": """
        documents projects reports archive drafts backups media photos music data research
        finance travel recipes taxes legal clients designs assets scripts temp shared personal
        school work notes logs exports imports invoices letters slides videos downloads
        templates staging vault old_files
    """,
    "line": """
        the quarterly numbers look stable|ship the prototype before friday|review the vendor
        contract again|revenue grew in the northern region|call the plumber about the leak|
        the server migration finished early|buy coffee filters and oat milk|update the onboarding
        guide|the meeting moved to thursday morning|archive last year's invoices|fix the login
        timeout bug|the garden needs more compost|book the conference room for june|draft the
        press release|the printer on floor two is jammed|renew the domain before it expires|
        the survey response rate was low|plan the team offsite in autumn|replace the broken
        keyboard|translate the manual into spanish|the shipment arrived damaged|schedule the
        dentist appointment|the backup job failed twice|order new business cards|collect receipts
        for the trip|the budget review is overdue|test the payment gateway|water the plants on
        monday|the audit found two minor issues|email the landlord about the heater|prepare
        slides for the keynote|the cache hit rate improved|pick up the dry cleaning|refactor the
        parser module|the new hire starts next week|clean the kitchen shelves|the sensor readings
        drifted overnight|reconcile the bank statement|the patch fixed the memory leak|return the
        library books|the demo went smoothly|label the storage boxes
    """,
    "title": """
        Login page not loading|Printer offline|VPN keeps disconnecting|Email sync failure|
        Laptop battery drains fast|Cannot access shared drive|Password reset request|Slow database
        queries|Broken link on homepage|Payment declined at checkout|Monitor flickering|Software
        license expired|Calendar invites missing|Wi-Fi drops in room 4|Keyboard keys sticking|
        App crashes on startup|Data export is empty|Duplicate invoices sent|Missing order
        confirmation|Report generation timeout|Headset microphone muted|Server disk almost full|
        Phone not ringing|Badge access denied|Projector has no signal|Spam filter too strict|
        Backup restore failed|Cannot install update|Wrong tax on receipt|Dashboard shows stale data|
        Elevator card reader broken|Shipping label misprinted|Chat widget not loading|Refund not
        received|Webcam shows black screen|Search returns no results|Mailbox quota exceeded|
        Scanner saves blank pages|Time sheet not submitting|Font rendering is blurry|Docking
        station not detected|Survey link expired|Coffee machine error E4|Locked out after update|
        Map tiles fail to load|Audio out of sync in calls|Build pipeline stuck|Stock count mismatch
    """,
    "description": """
        It started after the last update|Happens every morning around nine|Affects the whole
        team|Only on the second floor|Restarting did not help|The error code is 503|Seen on two
        different machines|Began yesterday afternoon|Customers are complaining about it|It works
        again after a few minutes|Blocking the quarterly close|Reported by the night shift|Occurs
        with large files only|Nothing in the logs so far|Worked fine last week
    """,
    "message": """
        Are we still on for lunch tomorrow?|The slides are ready for review.|Please send me the
        final budget.|Can you cover my shift on Friday?|The client approved the design.|Remember
        to sign the contract.|I pushed the fix to the main branch.|Let's move the call to 3pm.|
        Thanks for the quick turnaround!|The package was delivered this morning.|Could you
        upload the photos?|Happy birthday, have a great day!|The invoice is attached.|Meeting
        notes are in the shared folder.|Don't forget the team dinner tonight.|The test results
        look promising.|Can we reschedule our one-on-one?|I'll be late, traffic is terrible.|The
        demo is postponed to next week.|Welcome aboard, glad to have you!|Please review my pull
        request.|The venue is booked for Saturday.|Lunch is on me today.|The report needs one
        more chart.|Flight lands at seven, see you there.
    """,
    "resolution": """
        Replaced the faulty cable|Cleared the cache and restarted|Reinstalled the driver|
        Escalated to the vendor and patched|Reset the account permissions|Extended the storage
        quota|Rolled back the last update|Swapped the hardware unit|Updated the firewall rule|
        Renewed the license key|Fixed the configuration typo|Restored from the nightly backup|
        Applied the vendor hotfix|Recalibrated the sensor|Re-enabled the sync service|Replaced
        the toner cartridge|Cleared the stuck print queue|Rotated the expired certificate|Reset
        the router to factory settings|Rebuilt the search index|Granted the missing role|Moved
        the mailbox to a larger plan|Updated the tax table|Restarted the build agents
    """,
    "surname": """
        Abbott Barker Castillo Delaney Ellison Fairbanks Gallagher Holloway Iverson Jablonski
        Kowalski Lindqvist Moreau Nakamura Okafor Petrov Quinlan Rasmussen Santoro Takahashi
        Underwood Valdez Whitaker Yamamoto Zimmerman Ashdown Bellamy Carrick Draycott Eastwood
        Fenwick Granger Hartley Ingram Jessup Kendrick Lockhart Marlowe Norwood Pemberton
        Radcliffe Sinclair Thorne Winslow Yardley
    """,
    # BFCL's travel and vehicle tools know only these cities (get_nearest_airport_by_city,
    # get_zipcode_based_on_city); their split is chosen by hand (`_TEST_MEMBERS`).
    "city": """
        Rivermist|Stonebrook|Maplecrest|Silverpine|Shadowridge|London|Paris|Sunset Valley|
        Oakendale|Willowbend|Crescent Hollow|Autumnville|Pinehaven|Greenfield|San Francisco|
        Los Angeles|New York|Chicago|Boston|Beijing|Hong Kong|Rome|Tokyo
    """,
    # The companies BFCL's get_symbol_by_name knows; other stocks are ours (`ticker`).
    "company": """
        Apple|Google|Tesla|Microsoft|Nvidia|Zeta Corp|Alpha Tech|Omega Industries|Quasar Ltd.|
        Neptune Systems|Synex Solutions|Amazon|Gorilla
    """,
    "ticker": """
        BRXN CLVO DYNQ ELMR FOXT GRNV HLXA IONZ JUPR KRYS LUMQ MRVX NOVB ORBQ PLSM QRKT RDNX SOLQ
        TRVQ UMBX VELK WNDX XENQ YLDR ZPHR ACRQ BLZQ CRVZ DNMQ EVRX FLKQ GYRO HPTX INKQ JOLT KVRA
    """,
    "tweet": """
        Just shipped a new feature, feels great|Morning run done before sunrise|Reading a
        fantastic book on urban design|Our team hit the quarterly goal|Trying out a new pasta
        recipe tonight|The conference keynote was inspiring|Finally fixed that flaky test|Rainy
        days are perfect for coding|Looking for podcast recommendations|The garden tomatoes are
        ripe|Halfway through the marathon training plan|New blog post about data pipelines is
        up|Coffee first, questions later|Volunteering at the food bank this weekend|The sunset
        over the bay was unreal|Learning to play the cello at forty|Our startup just closed its
        first round|Weekend hike with the dogs|Debugging is like being a detective|The museum
        reopened its modern art wing|Bike commute beats traffic every time|Excited for the
        product launch next week|Planted three new trees in the backyard|The library book sale
        starts friday|Hot take: tabs are better than spaces|Just adopted a rescue cat|Working
        from the mountains this month|The new cafe downtown has great pastries|Wrapped up a
        long sprint today|Grateful for a supportive team
    """,
    "hashtag": """
        launchday fitness booklover milestone foodie keynote testing rainyday podcasts gardening
        marathon datapipelines coffee volunteering sunset music startup hiking debugging museums
        cycling productlaunch sustainability bookfair devlife adoptdontshop remotework pastry
        sprint gratitude photography travelgram mondaymotivation opensource weekendvibes
    """,
    "comment": """
        Congrats, well deserved!|This is so inspiring|Totally agree with this|Can you share more
        details?|Great work, keep it up|Love this update|Count me in next time|Thanks for
        sharing|That looks amazing|Wishing you the best of luck|So proud of the team|Where can I
        find the slides?|Looking forward to it|Brilliant idea|Let's catch up soon about this|
        This made my day|Saving this for later|Happy to help if needed|Nice, what tools did you
        use?|Cannot wait to try it
    """,
    "street": """
        Maple Avenue|Birch Lane|Harbor Road|Juniper Street|Quarry Drive|Lantern Way|Orchard
        Boulevard|Willow Court|Copper Street|Meadow Lane|Granite Avenue|Falcon Drive|Cedar
        Terrace|Beacon Street|Ridge Road|Chestnut Place|Sparrow Lane|Mill Street|Lakeview
        Drive|Summit Avenue|Pine Hollow Road|Elm Crescent|Foundry Lane|Riverside Drive|Aspen
        Way|Clover Street|Harvest Road|Marble Avenue|Tidewater Lane|Orchid Court
    """,
    "support": """
        My seat assignment disappeared|I need to change my meal preference|The confirmation
        email never arrived|Please add extra legroom if possible|I was charged twice for this
        booking|Can I bring my bicycle on board?|My name is misspelled on the ticket|I need
        wheelchair assistance at the gate|The app shows the wrong departure time|I would like
        to add a checked bag|Is there an earlier connection available?|My loyalty number is
        missing from the booking|I need a receipt for my employer|Can the booking be moved
        to the next day?|I am travelling with a service animal
    """,
}

# Closed sets of BFCL's own tools: the hash would leave too few cities in test for a flight
# route or a driving distance between two of them, so test's part is chosen by hand (both splits
# keep routes and distances; tests/envs/test_generated.py checks it).
_TEST_MEMBERS: dict[str, frozenset[str]] = {
    "city": frozenset({"Shadowridge", "Sunset Valley", "Autumnville", "Crescent Hollow",
                       "Pinehaven", "Tokyo", "Paris"}),
}


def _items(kind: str) -> tuple[str, ...]:
    text = _WORDS[kind]
    parts = text.split("|") if "|" in text else text.split()
    return tuple(" ".join(p.split()) for p in parts if p.strip())


def split_of(item: str) -> str:
    """`train` or `test`: the split an entity belongs to, fixed by the SHA-256 of its text
    (kinds in `_TEST_MEMBERS` are split by hand instead)."""
    digest = hashlib.sha256(f"seetjax-generated:{item}".encode()).digest()
    return "test" if digest[0] * 100 < _TEST_PERCENT * 256 else "train"


@functools.cache
def vocab(kind: str, split: str) -> tuple[str, ...]:
    """The entities of one kind (`person`, `stem`, `folder`, `line`, `title`, `description`,
    `message`, `resolution`, `surname`, `city`, `company`, `ticker`, `tweet`, `hashtag`,
    `comment`, `street`, `support`) that belong to `split`, in a fixed order."""
    if split not in SPLITS:
        raise invalid("vocab", "split", split, f"one of {SPLITS}")
    if kind in _TEST_MEMBERS:
        held_out = _TEST_MEMBERS[kind]
        return tuple(item for item in _items(kind) if (item in held_out) == (split == "test"))
    return tuple(item for item in _items(kind) if split_of(item) == split)


KINDS = tuple(_WORDS)
