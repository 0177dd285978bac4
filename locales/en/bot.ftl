# The bot's words in English: the reference set. Every other language has exactly these
# messages, each with the same placeholders (checked at start-up). Text is sent as plain text.
# Values arrive formatted: prices ({ $price }), periods ({ $period }), dates ({ $until }, …).

## Formats

# How a date and time reads (chrono's strftime pattern; month names come from the locale data).
date-time-format = %Y-%m-%d %H:%M UTC
# A channel whose title has nothing printable.
channel-fallback = Channel { $id }
price-stars = { $amount } ⭐
price-money = { $amount } { $currency }
period =
    { $days ->
        [one] { $days } day
       *[other] { $days } days
    }
percent = { $percent } %

## Telegram's payment form (a refused pre-checkout; at most 100 characters)

pre-checkout-busy = Please try again in a moment.
pre-checkout-unknown-order = We could not find this order. Please start a new order.
pre-checkout-order-cancelled = This order was cancelled. Please start a new order.
pre-checkout-already-paid = This order has already been paid.
pre-checkout-payer-mismatch = This invoice was issued to another Telegram account.
pre-checkout-currency-mismatch = This order cannot be paid with Telegram Stars.
pre-checkout-amount-mismatch = The invoice amount does not match the order. Please start a new order.
pre-checkout-channel-inactive = This channel or group is not accepting subscriptions right now.
pre-checkout-hold-expired = This invoice has expired. Please start a new order.
pre-checkout-no-seat = This seat has just been taken. Please choose another channel or group, or try later.
pre-checkout-hold-limited = You held a seat here recently without paying. Please try again later.
pre-checkout-promo-exhausted = This price is no longer available. Please start a new order.
pre-checkout-already-lifetime = You already have lifetime access to this channel or group.
pre-checkout-hold-limited-until = You held a seat here recently without paying. Try again after { $when }.

## Access (sent by the effects worker)

grant =
    Payment received, thank you! Your access to «{ $title }» is active until { $until }.

    Join here: { $link }
    Tap the link and send a join request: it is approved automatically for members.
grant-for-life =
    Payment received, thank you! Your access to «{ $title }» is yours for life: it never expires.

    Join here: { $link }
    Tap the link and send a join request: it is approved automatically for members.
renewal-receipt = Payment received, thank you! Your access to «{ $title }» now lasts until { $until }.
lifetime-receipt = Payment received, thank you! Your access to «{ $title }» is now yours for life: it never expires.
reminder = Your access to «{ $title }» ends on { $ends }. Renew before then to keep it: /subscriptions
grace-notice = Your access to «{ $title }» expired on { $expired }. You are in a short grace period: renew now to keep your place: /subscriptions

## The catalogue (/start, /help, deep links)

catalogue-header = Here are the channels and groups you can join:
catalogue-footer = Tap a button to buy. /subscriptions shows the channels and groups you have.
catalogue-empty = There are no channels or groups for sale right now. Please check back later.
unknown-channel = Sorry, this channel or group is not available.
unknown-plan = Sorry, this plan is not available.
more-button = More channels and groups ›
help =
    I sell access to private channels and groups.

    /start shows the channels and groups you can join.
    /subscriptions shows the channels and groups you have.
    /code CODE applies a promo code to your next order.
    /language changes the language I write in.
price-line-recurring = { $price } every { $period }, renews automatically
price-line-period = { $price } for { $period }
price-line-lifetime = { $price }, lifetime access
discounted = { $price }, was { $listPrice }
trial-line = free for { $period }
plan-line = • { $name }: { $line }
bundle-line = Also gives access to { $titles }.
have-lifetime = You have lifetime access.
full = Full right now: no free seats.
not-on-sale = Not on sale right now.
trial-button = Try free for { $period }
buy-button = Buy: { $title } · { $price }
subscribe-button = Subscribe: { $title } · { $price }

## Answers to buttons (shown above the chat, at most 200 characters)

invoice-on-its-way = Your invoice is on its way.
invoice-already-sent = Your invoice for this channel or group is in the chat above; it is still valid.
button-invalid = This button is no longer valid. Send /start to see the channels and groups.
channel-unavailable = Sorry, this channel or group is not available any more. Send /start to see the channels and groups.
promo-price-gone = Sorry, this price is no longer available. Please start a new order.
channel-full = Sorry, «{ $title }» is full right now. Please try again later.
hold-limited-cooldown = Your last seat hold on «{ $title }» ran out before it was paid. You can try again after { $when }.
hold-limited-daily = You have held a seat on «{ $title }» several times today without paying. You can try again after { $when }.
cannot-be-paid = Sorry, «{ $title }» cannot be paid for right now. Please try again later.
already-lifetime = You already have lifetime access to «{ $title }». There is nothing more to buy.
trial-used = You already had a trial or a membership of «{ $title }»: the free trial is for new members only.
free-access-granted = Done! Your free access to { $channels } has started. Your join link is on its way.
code-refused-at-order = Your code { $code } cannot be used for this order ({ $why }). Press the button again to buy at the full price of { $listPrice }.
already-subscribed = You are subscribed to «{ $title }»; it renews automatically on { $renewsAt }.
renewal-cancelled = Renewal cancelled. Your access stays until it expires.
renewal-already-cancelled = This subscription's renewal is already cancelled.

## Invoices (title at most 32 characters, description 255)

invoice-description-period = { $period } of access to «{ $title }».
invoice-description-lifetime = Lifetime access to «{ $title }».
invoice-label-period = { $period } of access
invoice-label-lifetime = Lifetime access
subscription-offer = Subscribe to «{ $title }»: { $price } every { $period }, charged automatically until you cancel (/subscriptions). Tap the button to pay with Telegram Stars.
subscription-button = Subscribe for { $price }
card-offer-period =
    Pay { $price } by card for { $period } of access to «{ $title }». The payment page is open for { $minutes ->
        [one] { $minutes } minute
       *[other] { $minutes } minutes
    }.
card-offer-lifetime =
    Pay { $price } by card for lifetime access to «{ $title }». The payment page is open for { $minutes ->
        [one] { $minutes } minute
       *[other] { $minutes } minutes
    }.
card-button = Pay { $price } by card
# One of two card pages (WayForPay, Stripe): the buyer picks.
card-button-via = Pay { $price } by card ({ $gateway })

# Crypto Pay (@CryptoBot): the assets offered beside the other ways to pay, and the invoice.
crypto-choice = Or pay for «{ $title }» in crypto with @CryptoBot:
crypto-button = Pay { $price } (@CryptoBot)
crypto-offer =
    Pay { $price } for «{ $title }» with @CryptoBot. The invoice is open for { $minutes ->
        [one] { $minutes } minute
       *[other] { $minutes } minutes
    }.
crypto-pay-button = Pay { $price }
crypto-unavailable = Sorry, this crypto payment is no longer available. Press buy again for a new invoice.

## Promo codes (/code, deep links with a code)

code-usage = Send /code followed by your promo code, for example: /code SPRING25
code-applied = Code { $code } applied: { $gives }. It is kept for your next order for one hour; the prices with it are shown in /start.
code-gives-on = −{ $off } on { $plans }
code-gives-all = −{ $off } on every plan
code-refused = Sorry, the code { $code } cannot be used: { $why }.
code-unknown = there is no such code
code-inactive = it is no longer active
code-expired = it has expired
code-exhausted = it has been used up
code-used-by-you = you have used it already
code-not-for-plan = it is not valid for this plan
code-first-purchase = it is for a first purchase only
code-no-plan = no plan on sale takes it
code-taken = it is no longer available

## /subscriptions

subscriptions-header = Your channels and groups:
portal-button = Open my subscriptions
subscriptions-empty = You have no channels or groups yet. Send /start to see the channels and groups you can join.
subscriptions-more = …and { $count } more.
membership-ended = Ended.
membership-lifetime = Lifetime access: it never expires.
membership-active = Active until { $at }.
membership-grace = Expired on { $at }; in a short grace period: renew to keep it.
membership-expired = Expired on { $at }.
renews-automatically = Renews automatically on { $renewsAt }.
renewal-off = Renewal cancelled: it will not renew.
renew-button = Renew: { $title }
cancel-renewal-button = Cancel renewal: { $title }
subscription-cancelled-until = Your subscription to «{ $title }» will not renew. Your access stays until { $until }.
subscription-cancelled = Your subscription to «{ $title }» will not renew.

## /language

language-choose = Choose the language I write in:
language-chosen = From now on I write in English.

## What happened to a payment

payment-refunded-seat = Sorry, the last seat of «{ $title }» was taken before your payment of { $price } arrived. Your stars will be refunded.
payment-refunded = We could not use your payment of { $price } for «{ $title }» (the order was already paid or its invoice had expired). Your stars will be refunded.
payment-in-review-seat = Sorry, the last seat of «{ $title }» was taken before your payment of { $price } arrived. We will review your payment and get back to you about a refund.
payment-in-review = We could not apply your payment of { $price } for «{ $title }» automatically. We will review it and get back to you.
subscription-stopped-channel-inactive = The channel or group is not accepting subscriptions right now, so we cancelled this subscription: you will not be charged for it again.
subscription-stopped-no-seat = The channel or group is full, so we cancelled this subscription: you will not be charged for it again.
subscription-stopped-hold-expired = The invoice had expired, so we cancelled this subscription: you will not be charged for it again.
subscription-stopped-already-paid = You already have a subscription for this order, so we cancelled this subscription: you will not be charged for it again.
subscription-stopped-already-lifetime = You already have lifetime access to this channel or group, so we cancelled this subscription: you will not be charged for it again.
subscription-stopped-promo-exhausted = The promo price is no longer available, so we cancelled this subscription: you will not be charged for it again.
subscription-stopped = So we cancelled this subscription: you will not be charged for it again.
payment-already-lifetime-refunded = You already have lifetime access to «{ $title }», so your payment of { $price } was not needed. Your stars will be refunded.
payment-already-lifetime-review = You already have lifetime access to «{ $title }», so your payment of { $price } was not needed. We will review it and get back to you about a refund.
payment-unknown-order = We received your payment of { $price } but could not match it to an order. We will review it and get back to you.

## Fiscal receipts

fiscal-receipt-sale = Your receipt for { $price } («{ $title }»): { $url }
fiscal-receipt-return = Your refund receipt for { $price } («{ $title }»): { $url }

## Promo code guesses and Stars subscriptions changed in Telegram

code-too-many =
    Too many wrong codes. Please try again in { $minutes ->
        [one] { $minutes } minute
       *[other] { $minutes } minutes
    }.
subscription-renewal-failed-until = Telegram could not charge the renewal of your subscription to «{ $title }». Your access stays until { $until }. To keep it, top up your Telegram Stars and renew the subscription in Telegram (Settings → My Stars), or buy again here: /subscriptions
subscription-renewal-failed = Telegram could not charge the renewal of your subscription to «{ $title }». To keep your access, top up your Telegram Stars and renew the subscription in Telegram (Settings → My Stars), or buy again here: /subscriptions
reminder-renews = Your subscription to «{ $title }» renews automatically on { $renewsAt }. Keep enough Telegram Stars for it. To stop it: /subscriptions

## What was given without a payment, the end of access, codes already applied, card pages

# A grant nobody paid for: a trial, a free order (a 100 % code), staff.
grant-trial =
    Your free trial of «{ $title }» has started: your access lasts until { $until }.

    Join here: { $link }
    Tap the link and send a join request: it is approved automatically for members.
grant-free =
    Your free access to «{ $title }» is active until { $until }.

    Join here: { $link }
    Tap the link and send a join request: it is approved automatically for members.
grant-free-for-life =
    Your free access to «{ $title }» is yours for life: it never expires.

    Join here: { $link }
    Tap the link and send a join request: it is approved automatically for members.
grant-staff =
    You have been given access to «{ $title }» until { $until }.

    Join here: { $link }
    Tap the link and send a join request: it is approved automatically for members.
grant-referral =
    A friend you invited bought access — thank you! You have free access to «{ $title }» until { $until }.

    Join here: { $link }
    Tap the link and send a join request: it is approved automatically for members.
grant-staff-for-life =
    You have been given lifetime access to «{ $title }»: it never expires.

    Join here: { $link }
    Tap the link and send a join request: it is approved automatically for members.
# A member's term made longer without a payment (staff, a free order).
access-extended = Your access to «{ $title }» has been extended until { $until }.
access-extended-referral = A friend you invited bought access — thank you! Your access to «{ $title }» is extended until { $until }.
access-extended-for-life = Your access to «{ $title }» is now yours for life: it never expires.
# Access ended (with a renew button): its term ran out; its payment was refunded; staff ended it.
access-ended = Your access to «{ $title }» has ended. Renew it to come back.
access-ended-refunded = Your access to «{ $title }» has ended: the payment for it was refunded.
access-ended-revoked = Your access to «{ $title }» has been ended.
# /code for a code the buyer's pending order already uses.
code-already-applied = Code { $code } is already applied to your order of «{ $title }»: { $price } instead of { $listPrice }. Its invoice is in the chat above.
# A card press when no card page could stay open long enough (HOLD_SECS under a minute).
card-unavailable = Sorry, card payment for «{ $title }» is not available right now. Please try again later.

## Messages to members: broadcasts and automations, and the buyer's consent to them

# The last line of every broadcast and automation.
marketing-stop-hint = Send /stop to stop these messages.
# The answer to /stop.
marketing-stopped = Done: you will get no more news or offers from this bot. Messages about your own access and payments still come. Send /start to receive them again.
# The button of a broadcast or an offer.
message-buy-button = Buy: { $title }
# The button back to an order that can still be paid.
message-pay-button = Complete the payment

## /referral: the buyer's own referral link

# A friend's first purchase through the link earns the buyer free days of access.
referral-link-days =
    Your referral link:
    { $link }

    Share it with friends: for each friend's first purchase through it, you get { $days ->
        [one] { $days } free day
       *[other] { $days } free days
    } of access.
# A friend's first purchase through the link earns the buyer a percent of it.
referral-link-percent =
    Your referral link:
    { $link }

    Share it with friends: for each friend's first purchase through it, you earn { $percent } of its price.
# The link, when the program sets nothing for the buyer to earn.
referral-link =
    Your referral link:
    { $link }

    Share it with friends.
# The program is off, buyers get no links of their own, or the bot has no username.
referral-unavailable = Sorry, referral links are not available right now.
# The buyer's own referral link was switched off by staff.
referral-refused = Sorry, the referral program is not available to you.
